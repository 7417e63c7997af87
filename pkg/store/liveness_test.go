package store_test

import (
	"context"
	"strconv"
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
	_, err := st.AdvanceRun(context.Background(), key)
	require.NoError(t, err)
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
	a, ok, err := st.AssignTask(ctx, taskID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	for _, rep := range states {
		_, err := st.ReportAttempt(ctx, a.ID, rep)
		require.NoError(t, err)
	}
	return a
}

var (
	running     = store.Report{State: domain.TaskRunning}
	workerLost  = store.Report{State: domain.TaskWorkerFailed, Cause: "worker_lost"}
	systemFail  = store.Report{State: domain.TaskFailed, Cause: "system", Error: "cannot create the work dir"}
	userFail    = store.Report{State: domain.TaskFailed, Cause: "user", ExitCode: intp(1)}
	succeeded   = store.Report{State: domain.TaskSucceeded, ExitCode: intp(0)}
	killedAbort = store.Report{State: domain.TaskKilled, Cause: "aborted"}
)

func getWorker(t *testing.T, st *store.Store, id string) (store.WorkerLoad, bool) {
	t.Helper()
	ws, err := st.ListWorkers(context.Background())
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
	ws, err := st.PlaceableWorkers(context.Background(), time.Hour)
	require.NoError(t, err)
	for _, w := range ws {
		if w.ID == id {
			return true
		}
	}
	return false
}

func finishedAt(t *testing.T, st *store.Store, attemptID int64) time.Time {
	t.Helper()
	r, err := st.GetAttemptRun(context.Background(), attemptID)
	require.NoError(t, err)
	require.NotNil(t, r.Attempt.FinishedAt)
	return *r.Attempt.FinishedAt
}

// TestWhatCountsAsAWorkerFailure: a worker's failures are "attempts lost or
// failed for platform causes on that worker" (issue #5, after ARC's
// EphemeralRunner status.failures).
func TestWhatCountsAsAWorkerFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		final  store.Report
		counts bool
	}{
		{"WORKER_FAILED (worker lost) counts", workerLost, true},
		{"FAILED with cause system counts", systemFail, true},
		{"FAILED with cause user is the task's fault", userFail, false},
		{"SUCCEEDED does not count", succeeded, false},
		{"KILLED by an abort does not count", killedAbort, false},
	}
	st := storetest.New(t)
	tasks := startedTasks(t, st, "kinds", len(tests))
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := registerWorker(t, st)
			a := attemptIn(t, st, w, tasks[i], running, tt.final)
			rec, err := st.RecordWorkerFailure(context.Background(), a.ID, domain.ARCTable)
			require.NoError(t, err)
			got, ok := getWorker(t, st, w.ID)
			require.True(t, ok)
			failures, err := store.DecodeFailures(got.Failures)
			require.NoError(t, err)
			if !tt.counts {
				require.Empty(t, rec.WorkerID)
				require.Empty(t, failures)
				require.Nil(t, got.PlaceableAfter)
				return
			}
			require.Equal(t, w.ID, rec.WorkerID)
			require.Equal(t, 1, rec.Failures)
			require.Contains(t, failures, itoa(a.ID))
			require.WithinDuration(t, finishedAt(t, st, a.ID), failures[itoa(a.ID)], time.Millisecond)
			require.NotNil(t, got.LastFailureAt)
		})
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestFailureBackoffFollowsARCTable checks ARC's rule, seeds/001:
//
//	if len(er.Status.Failures) <= maxFailures {
//	    delay := failedRunnerBackoff[len(er.Status.Failures)]   // 0, 5s, 10s, 20s, 40s, 80s
//	    return ctrl.Result{RequeueAfter: delay}, nil
//	}
//	if len(er.Status.Failures) > maxFailures { r.Delete(ctx, er) }   // maxFailures = 5
//
// With n failures recorded the worker takes no new work until table[n] after
// the latest; the 6th deletes the worker, ending what it still runs.
func TestFailureBackoffFollowsARCTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	tasks := startedTasks(t, st, "arc", 7)
	bystander := attemptIn(t, st, w, tasks[6], running)

	steps := []struct {
		n     int
		delay time.Duration
	}{{1, 5 * time.Second}, {2, 10 * time.Second}, {3, 20 * time.Second}, {4, 40 * time.Second}, {5, 80 * time.Second}}
	for i, step := range steps {
		a := attemptIn(t, st, w, tasks[i], running, workerLost)
		rec, err := st.RecordWorkerFailure(ctx, a.ID, domain.ARCTable)
		require.NoError(t, err)
		require.False(t, rec.Deleted)
		require.Equal(t, step.n, rec.Failures)
		require.WithinDuration(t, finishedAt(t, st, a.ID).Add(step.delay), rec.PlaceableAfter, time.Millisecond,
			"failure %d: wait failedRunnerBackoff[%d] after the last one", step.n, step.n)
		got, _ := getWorker(t, st, w.ID)
		require.WithinDuration(t, rec.PlaceableAfter, *got.PlaceableAfter, time.Millisecond)
		require.WithinDuration(t, finishedAt(t, st, a.ID), *got.LastFailureAt, time.Millisecond)
		require.False(t, placeable(t, st, w.ID), "no new work during the backoff")

		again, err := st.RecordWorkerFailure(ctx, a.ID, domain.ARCTable)
		require.NoError(t, err)
		require.Equal(t, step.n, again.Failures, "recording an attempt twice counts it once")
	}

	sixth := attemptIn(t, st, w, tasks[5], running, systemFail)
	rec, err := st.RecordWorkerFailure(ctx, sixth.ID, domain.ARCTable)
	require.NoError(t, err)
	require.True(t, rec.Deleted, "past maxFailures the worker is deleted")
	require.Equal(t, 6, rec.Failures)
	_, ok := getWorker(t, st, w.ID)
	require.False(t, ok, "never left as a failed zombie holding capacity")
	require.Equal(t, []store.LostAttempt{{ID: bystander.ID, TaskID: tasks[6], WorkerID: w.ID}}, rec.Lost)
	r, err := st.GetAttemptRun(ctx, bystander.ID)
	require.NoError(t, err)
	require.Equal(t, int16(domain.TaskWorkerFailed), r.Attempt.State)
	require.Equal(t, "worker_lost", *r.Attempt.Cause)
	_, err = st.BeatWorker(ctx, w.ID, store.Beat{})
	require.ErrorIs(t, err, store.ErrNotFound, "its executor re-registers under a new identity")
}

// TestShrunkTableGatesPlacement: a zero entry places at once, a long one
// excludes the worker from placement, and a table of length k deletes on the
// k-th failure.
func TestShrunkTableGatesPlacement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name      string
		table     domain.Table
		placeable bool
		deleted   bool
	}{
		{"table[1] = 0 places at once", domain.Table{0, 0, time.Hour}, true, false},
		{"table[1] = 1h holds new work", domain.Table{0, time.Hour}, false, false},
		{"a table of one entry deletes on the first failure", domain.Table{0}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := storetest.New(t)
			w := registerWorker(t, st)
			a := attemptIn(t, st, w, startedTasks(t, st, "shrunk", 1)[0], running, workerLost)
			rec, err := st.RecordWorkerFailure(ctx, a.ID, tt.table)
			require.NoError(t, err)
			require.Equal(t, tt.deleted, rec.Deleted)
			require.Equal(t, tt.placeable, placeable(t, st, w.ID))
		})
	}
}

// TestReapDeadWorkers: "Set by the controller when a worker dies.
// _on_worker_failed iterates all tasks on the dead worker and emits
// TaskStateChangedEvent with TASK_STATE_WORKER_FAILED for each non-terminal
// task. Retry evaluation uses the preemption budget" (seeds/002).
func TestReapDeadWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	dead, alive := registerWorker(t, st), registerWorker(t, st)
	tasks := startedTasks(t, st, "reap", 3)
	runningOnDead := attemptIn(t, st, dead, tasks[0], running)
	assignedOnDead := attemptIn(t, st, dead, tasks[1])
	onAlive := attemptIn(t, st, alive, tasks[2], running)

	future := time.Now().Add(time.Hour)
	_, err := st.BeatWorker(ctx, alive.ID, store.Beat{Held: []int64{onAlive.ID}, At: future})
	require.NoError(t, err)
	r, err := st.ReapDeadWorkers(ctx, future.Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, []string{dead.ID}, r.Dead)
	lost := map[int64]bool{}
	for _, l := range r.Lost {
		lost[l.ID] = true
	}
	require.Equal(t, map[int64]bool{runningOnDead.ID: true, assignedOnDead.ID: true}, lost,
		"the alive worker's attempt is left alone")

	for _, id := range []int64{runningOnDead.ID, assignedOnDead.ID} {
		ar, err := st.GetAttemptRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, int16(domain.TaskWorkerFailed), ar.Attempt.State)
		require.Equal(t, "worker_lost", *ar.Attempt.Cause)
		require.NotNil(t, ar.Attempt.FinishedAt)
		ev, err := st.EvaluateAttempt(ctx, id, noDelay)
		require.NoError(t, err)
		require.Equal(t, domain.ShouldRetry, ev.Result)
		ar, err = st.GetAttemptRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, int16(domain.TaskPending), ar.Task.State, "requeued within its preemption budget")
		require.Equal(t, 1, ar.Task.PreemptionCount)
		require.Zero(t, ar.Task.FailureCount, "never charged to the failure budget")
	}
	w, ok := getWorker(t, st, dead.ID)
	require.True(t, ok)
	require.Equal(t, store.WorkerDead, w.State)
	failures, err := store.DecodeFailures(w.Failures)
	require.NoError(t, err)
	require.Len(t, failures, 2, "the lost attempts are recorded on the dead worker")
	require.False(t, placeable(t, st, dead.ID))
	_, err = st.BeatWorker(ctx, dead.ID, store.Beat{})
	require.ErrorIs(t, err, store.ErrNotFound, "a worker back from the dead must re-register")

	again, err := st.ReapDeadWorkers(ctx, future.Add(-time.Minute))
	require.NoError(t, err)
	require.Empty(t, again.Dead)
	require.Empty(t, again.Lost)

	n, err := st.DeleteDeadWorkers(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "kept for the retention")
	n, err = st.DeleteDeadWorkers(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestReapEndsAttemptsOfMissingWorkers: an attempt placed on a worker that
// died or was deleted meanwhile is not left ASSIGNED forever.
func TestReapEndsAttemptsOfMissingWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	tasks := startedTasks(t, st, "missing", 1)
	_, err := st.DeregisterWorker(ctx, w.ID)
	require.NoError(t, err)
	a, ok, err := st.AssignTask(ctx, tasks[0], w.ID) // raced with the deregistration
	require.NoError(t, err)
	require.True(t, ok)

	r, err := st.ReapDeadWorkers(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Empty(t, r.Dead)
	require.Equal(t, []store.LostAttempt{{ID: a.ID, TaskID: tasks[0], WorkerID: w.ID}}, r.Lost)
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

	reply, err := st.BeatWorker(ctx, w.ID, store.Beat{Held: []int64{held.ID, 999999}, At: t0.Add(2 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, []int64{999999}, reply.Stop, "attempts unknown to the control plane are stopped")
	require.Empty(t, reply.Lost, "the attempt may have started after the worker built this beat")

	reply, err = st.BeatWorker(ctx, w.ID, store.Beat{Held: []int64{held.ID}, At: t0.Add(5 * time.Second)})
	require.NoError(t, err)
	require.Empty(t, reply.Stop)
	require.Equal(t, []store.LostAttempt{{ID: forgotten.ID, TaskID: tasks[1], WorkerID: w.ID}}, reply.Lost,
		"running before the previous beat, and not held: its final report was lost")
	r, err := st.GetAttemptRun(ctx, forgotten.ID)
	require.NoError(t, err)
	require.Equal(t, int16(domain.TaskWorkerFailed), r.Attempt.State)
	r, err = st.GetAttemptRun(ctx, queued.ID)
	require.NoError(t, err)
	require.Equal(t, int16(domain.TaskAssigned), r.Attempt.State)

	require.True(t, placeable(t, st, w.ID))
	_, err = st.BeatWorker(ctx, w.ID, store.Beat{Held: []int64{held.ID}, Draining: true})
	require.NoError(t, err)
	_, err = st.BeatWorker(ctx, w.ID, store.Beat{Held: []int64{held.ID}})
	require.NoError(t, err)
	got, _ := getWorker(t, st, w.ID)
	require.True(t, got.Draining, "draining is sticky")
	require.False(t, placeable(t, st, w.ID), "a draining worker takes no new work")

	_, err = st.BeatWorker(ctx, "8d3c6a59-1f0e-4c38-9f0a-8a2b8e6f0c11", store.Beat{})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestDeregisterWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w, other := registerWorker(t, st), registerWorker(t, st)
	a := attemptIn(t, st, w, startedTasks(t, st, "dereg", 1)[0], running)

	lost, err := st.DeregisterWorker(ctx, w.ID)
	require.NoError(t, err)
	require.Len(t, lost, 1)
	require.Equal(t, a.ID, lost[0].ID)
	_, ok := getWorker(t, st, w.ID)
	require.False(t, ok)
	_, err = st.DeregisterWorker(ctx, w.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	states, err := st.WorkerStates(ctx, []string{w.ID, other.ID, "not-a-uuid"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{other.ID: store.WorkerAlive}, states, "a deregistered worker is unknown")
}
