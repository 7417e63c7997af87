package store_test

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

func TestAdoptAttemptsMovesTheLiveAttemptsOfTheSameName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	old := registerWorker(t, st)
	ids := assignedAttempts(t, st, old, "adopt", 3)
	exit := 0
	res, err := storetest.ReportAttempts(ctx, st, old.ID, []store.BatchedReport{
		{AttemptID: ids[0], Report: store.Report{State: domain.TaskRunning}},
		{AttemptID: ids[2], Report: store.Report{State: domain.TaskRunning}},
		{AttemptID: ids[2], Report: store.Report{State: domain.TaskSucceeded, ExitCode: &exit}},
	}, 1<<20)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	other := registerWorkerNamed(t, st, "someone-else")
	moved, err := st.Attempts().AdoptAttempts(ctx, other.ID, ids)
	require.NoError(t, err)
	require.Empty(t, moved, "another executor's attempts are not its own")

	again := registerWorkerNamed(t, st, old.Name)
	moved, err = st.Attempts().AdoptAttempts(ctx, again.ID, ids)
	require.NoError(t, err)
	require.Equal(t, ids[:2], moved, "the live ones; the ended one stays where it ended")
	for _, id := range moved {
		var attemptWorker, taskWorker string
		require.NoError(t, db.QueryRow(`SELECT at.worker_id, t.worker_id FROM attempts at
			JOIN tasks t ON t.id = at.task_id WHERE at.id = $1`, id).Scan(&attemptWorker, &taskWorker))
		require.Equal(t, again.ID, attemptWorker)
		require.Equal(t, again.ID, taskWorker)
	}
	moved, err = st.Attempts().AdoptAttempts(ctx, again.ID, ids)
	require.NoError(t, err)
	require.Empty(t, moved, "already its own")
}

// registerWorkerNamed registers a worker of name.
func registerWorkerNamed(t *testing.T, st *store.Store, name string) store.Worker {
	t.Helper()
	w, err := st.Workers().RegisterWorker(context.Background(), store.NewWorker{Name: name, Address: "http://127.0.0.1:1", Slots: 8})
	require.NoError(t, err)
	return w
}

func TestAdoptAttemptsLeavesADeadWorkersAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	old := registerWorker(t, st)
	ids := assignedAttempts(t, st, old, "dead", 1)
	_, err := db.Exec(`UPDATE workers SET state = 'dead' WHERE id = $1`, old.ID)
	require.NoError(t, err)
	moved, err := st.Attempts().AdoptAttempts(ctx, registerWorkerNamed(t, st, old.Name).ID, ids)
	require.NoError(t, err)
	require.Empty(t, moved, "a dead worker's attempts are being failed, not adopted")
}
