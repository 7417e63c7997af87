package server

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// TestRecordBeat: the heartbeat is Iris's reconciliation in both directions,
// and its draining flag is sticky.
func TestRecordBeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	w, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	require.NoError(t, err)
	tasks := startedReplicas(t, st, "beat", 3)
	held := attemptOn(t, st, w, tasks[0], domain.TaskRunning)
	forgotten := attemptOn(t, st, w, tasks[1], domain.TaskRunning)
	queued := attemptOn(t, st, w, tasks[2]) // ASSIGNED: may wait in the queue
	// Beats are stamped with Postgres's now(): the attempts were reported
	// 10 s ago, on a worker registered before them.
	_, err = db.ExecContext(ctx, `UPDATE attempts SET updated_at = updated_at - interval '10 seconds'`)
	require.NoError(t, err)
	require.NoError(t, storetest.Silence(ctx, db, w.ID, 20*time.Second))
	t0 := time.Now()

	stop, lost, err := recordBeat(ctx, st, w.ID, []int64{held.ID, 999999}, false, t0)
	require.NoError(t, err)
	require.Equal(t, []int64{999999}, stop, "attempts unknown to the control plane are stopped")
	require.Empty(t, lost, "the attempt may have started after the worker built this beat")

	stop, lost, err = recordBeat(ctx, st, w.ID, []int64{held.ID}, false, time.Now())
	require.NoError(t, err)
	require.Empty(t, stop)
	require.Equal(t, []store.LostAttempt{{ID: forgotten.ID, TaskID: tasks[1], WorkerID: w.ID}}, lost,
		"running before the previous beat, and not held: its final report was lost")
	r, err := st.Attempts().GetAttemptRun(ctx, forgotten.ID)
	require.NoError(t, err)
	require.Equal(t, domain.TaskWorkerFailed, r.Attempt.State)
	r, err = st.Attempts().GetAttemptRun(ctx, queued.ID)
	require.NoError(t, err)
	require.Equal(t, domain.TaskAssigned, r.Attempt.State)

	placeable := func() bool {
		ws, err := st.Placement().PlaceableWorkers(ctx, time.Hour)
		require.NoError(t, err)
		for _, x := range ws {
			if x.ID == w.ID {
				return true
			}
		}
		return false
	}
	require.True(t, placeable())
	_, _, err = recordBeat(ctx, st, w.ID, []int64{held.ID}, true, time.Now().UTC())
	require.NoError(t, err)
	_, _, err = recordBeat(ctx, st, w.ID, []int64{held.ID}, false, time.Now().UTC())
	require.NoError(t, err)
	ws, err := st.Workers().ListWorkers(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.True(t, ws[0].Draining, "draining is sticky")
	require.False(t, placeable(), "a draining worker takes no new work")

	_, _, err = recordBeat(ctx, st, "8d3c6a59-1f0e-4c38-9f0a-8a2b8e6f0c11", nil, false, time.Now().UTC())
	require.ErrorIs(t, err, store.ErrNotFound)
}

// startedReplicas creates run name of one step of n replicas, starts it,
// and returns its task ids.
func startedReplicas(t *testing.T, st *store.Store, name string, n int) []int64 {
	t.Helper()
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Replicas: &n}}}
	spec.Normalize()
	key := domain.RunKey{Project: "p", Domain: "d", Run: name}
	_, _, err := st.Runs().CreateRun(context.Background(), store.NewRun{Key: key, Spec: spec})
	require.NoError(t, err)
	storetest.StartSteps(t, st, key)
	d, err := st.Actions().GetAction(context.Background(), key.Action("s"))
	require.NoError(t, err)
	ids := make([]int64, len(d.Tasks))
	for i, td := range d.Tasks {
		ids[i] = td.Task.ID
	}
	require.Len(t, ids, n)
	return ids
}

// attemptOn assigns the task to w and reports the attempt through states.
func attemptOn(t *testing.T, st *store.Store, w store.Worker, taskID int64, states ...domain.TaskState) store.Attempt {
	t.Helper()
	ctx := context.Background()
	a, ok, err := storetest.AssignTask(ctx, st, taskID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	for _, s := range states {
		res, err := recordReports(ctx, st, "", []store.BatchedReport{{AttemptID: a.ID, Report: store.Report{State: s}}}, 0)
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
	}
	return a
}
