package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// startedTasks creates a run of one step with n replicas and returns its
// task ids.
func startedTasks(t *testing.T, st *store.Store, name string, n int) []int64 {
	t.Helper()
	key := newRun(t, st, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Replicas: intp(n)}}})
	storetest.StartSteps(t, st, key)
	var ids []int64
	for _, td := range tasksOf(t, st, key, "s") {
		ids = append(ids, td.Task.ID)
	}
	require.Len(t, ids, n)
	return ids
}

// attemptIn assigns the task to w and reports the attempt through states.
func attemptIn(t *testing.T, st *store.Store, w store.Worker, taskID int64, states ...store.Report) store.Attempt {
	t.Helper()
	ctx := context.Background()
	a, ok, err := storetest.AssignTask(ctx, st, taskID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	for _, rep := range states {
		_, err := st.Attempts().ReportAttempt(ctx, a.ID, rep)
		require.NoError(t, err)
	}
	return a
}

var running = store.Report{State: domain.TaskRunning}

func getWorker(t *testing.T, st *store.Store, id string) (store.WorkerLoad, bool) {
	t.Helper()
	ws, err := st.Workers().ListWorkers(context.Background())
	require.NoError(t, err)
	for _, w := range ws {
		if w.ID == id {
			return w, true
		}
	}
	return store.WorkerLoad{}, false
}

func placeable(t *testing.T, st *store.Store, id string) bool {
	t.Helper()
	ws, err := st.Placement().PlaceableWorkers(context.Background(), time.Hour)
	require.NoError(t, err)
	for _, w := range ws {
		if w.ID == id {
			return true
		}
	}
	return false
}

// TestBeatWorker: the heartbeat is Iris's reconciliation in both directions,
// and its draining flag is sticky.
func TestBeatWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	tasks := startedTasks(t, st, "beat", 3)
	held := attemptIn(t, st, w, tasks[0], running)
	forgotten := attemptIn(t, st, w, tasks[1], running)
	queued := attemptIn(t, st, w, tasks[2]) // ASSIGNED: may wait in the queue
	t0 := time.Now()

	reply, err := st.Workers().BeatWorker(ctx, w.ID, store.Beat{Held: []int64{held.ID, 999999}, At: t0.Add(2 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, []int64{999999}, reply.Stop, "attempts unknown to the control plane are stopped")
	require.Empty(t, reply.Lost, "the attempt may have started after the worker built this beat")

	reply, err = st.Workers().BeatWorker(ctx, w.ID, store.Beat{Held: []int64{held.ID}, At: t0.Add(5 * time.Second)})
	require.NoError(t, err)
	require.Empty(t, reply.Stop)
	require.Equal(t, []store.LostAttempt{{ID: forgotten.ID, TaskID: tasks[1], WorkerID: w.ID}}, reply.Lost,
		"running before the previous beat, and not held: its final report was lost")
	r, err := st.Attempts().GetAttemptRun(ctx, forgotten.ID)
	require.NoError(t, err)
	require.Equal(t, domain.TaskWorkerFailed, r.Attempt.State)
	r, err = st.Attempts().GetAttemptRun(ctx, queued.ID)
	require.NoError(t, err)
	require.Equal(t, domain.TaskAssigned, r.Attempt.State)

	require.True(t, placeable(t, st, w.ID))
	_, err = st.Workers().BeatWorker(ctx, w.ID, store.Beat{Held: []int64{held.ID}, Draining: true})
	require.NoError(t, err)
	_, err = st.Workers().BeatWorker(ctx, w.ID, store.Beat{Held: []int64{held.ID}})
	require.NoError(t, err)
	got, _ := getWorker(t, st, w.ID)
	require.True(t, got.Draining, "draining is sticky")
	require.False(t, placeable(t, st, w.ID), "a draining worker takes no new work")

	_, err = st.Workers().BeatWorker(ctx, "8d3c6a59-1f0e-4c38-9f0a-8a2b8e6f0c11", store.Beat{})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestDeregisterWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w, other := registerWorker(t, st), registerWorker(t, st)
	a := attemptIn(t, st, w, startedTasks(t, st, "dereg", 1)[0], running)

	lost, err := st.Workers().DeregisterWorker(ctx, w.ID)
	require.NoError(t, err)
	require.Len(t, lost, 1)
	require.Equal(t, a.ID, lost[0].ID)
	_, ok := getWorker(t, st, w.ID)
	require.False(t, ok)
	_, err = st.Workers().DeregisterWorker(ctx, w.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	states, err := st.Workers().WorkerStates(ctx, []string{w.ID, other.ID, "not-a-uuid"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{other.ID: store.WorkerAlive}, states, "a deregistered worker is unknown")
}
