package scheduler

import (
	"context"
	"database/sql"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// liveFixture is a scheduler on a fresh database, also open through
// database/sql (db) for the statements a test makes itself: the liveness
// watch and the heartbeats it moves on Postgres's clock.
type liveFixture struct {
	s     *Scheduler
	st    *store.Store
	db    *sql.DB
	queue *asynq.Client
	insp  *asynq.Inspector
}

func newLiveFixture(t *testing.T, table domain.Table) *liveFixture {
	t.Helper()
	return newLiveFixtureWith(t, LivenessConfig{Backoff: table})
}

// newLiveFixtureWith is newLiveFixture with the liveness settings live; its
// Queues is the fixture's inspector.
func newLiveFixtureWith(t *testing.T, live LivenessConfig) *liveFixture {
	t.Helper()
	redis := redistest.New(t)
	f := &liveFixture{queue: asynq.NewClient(redis), insp: asynq.NewInspector(redis)}
	f.st, f.db = storetest.NewWithDB(t, store.Config{MaxOpenConns: 10})
	t.Cleanup(func() { f.queue.Close(); f.insp.Close() })
	log := slog.New(slog.DiscardHandler)
	live.Queues = f.insp
	f.s = New(f.st, queue.NewEnqueuer(f.queue, log), log, prometheus.NewRegistry(), Config{
		WorkerGrace: time.Minute, Retry: domain.Table{0}, Liveness: live})
	return f
}

// running creates a one-task run and an attempt of it RUNNING on w, with an
// attempt:run left in w's queue.
func (f *liveFixture) running(t *testing.T, w store.Worker, name string) store.Attempt {
	t.Helper()
	ctx := context.Background()
	key := domain.RunKey{Project: "p", Domain: "d", Run: name}
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600"}}}
	spec.Normalize()
	_, _, err := f.st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec})
	require.NoError(t, err)
	_, err = f.s.advance(ctx, key)
	require.NoError(t, err)
	d, err := f.st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	a, ok, err := storetest.AssignTask(ctx, f.st, d.Tasks[0].Task.ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = storetest.ReportAttempt(ctx, f.st, a.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)
	_, err = f.queue.Enqueue(queue.NewAttemptRunTask(w.ID, a.ID, nil))
	require.NoError(t, err)
	return a
}

// watched writes the liveness watch of a control plane that has worked
// for an hour: silence counts from before any worker registered.
func (f *liveFixture) watched(t *testing.T) {
	t.Helper()
	require.NoError(t, storetest.Watched(context.Background(), f.db, time.Hour))
}

// silence makes worker id's last heartbeat d old, on Postgres's clock.
func (f *liveFixture) silence(t *testing.T, id string, d time.Duration) {
	t.Helper()
	require.NoError(t, storetest.Silence(context.Background(), f.db, id, d))
}

func (f *liveFixture) register(t *testing.T) store.Worker {
	t.Helper()
	w, err := f.st.Workers().RegisterWorker(context.Background(), store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 4})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.insp.DeleteQueue(queue.WorkerQueue(w.ID), true) })
	return w
}

func (f *liveFixture) hasQueue(t *testing.T, workerID string) bool {
	t.Helper()
	qs, err := f.insp.Queues()
	require.NoError(t, err)
	return slices.Contains(qs, queue.WorkerQueue(workerID))
}

func (f *liveFixture) task(t *testing.T, attemptID int64) store.Task {
	t.Helper()
	r, err := f.st.Attempts().GetAttemptRun(context.Background(), attemptID)
	require.NoError(t, err)
	return r.Task
}

// Its queue sweep deletes every worker queue of its Redis database that its
// own Postgres database does not know: redistest gives it a database of its
// own, so it may run in parallel.
func TestLivenessPassDeclaresSilentWorkersDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLiveFixture(t, domain.ARCTable)
	silent, alive := f.register(t), f.register(t)
	lost, kept := f.running(t, silent, "lost"), f.running(t, alive, "kept")
	_, err := storetest.Heartbeat(ctx, f.st, silent.ID, storetest.Beat{Held: []int64{lost.ID}})
	require.NoError(t, err)
	f.silence(t, silent.ID, 2*time.Minute)
	f.watched(t)
	require.True(t, f.hasQueue(t, silent.ID))
	stranger := uuid.NewString() // a worker of another Capstan on this Redis
	_, err = f.queue.Enqueue(queue.NewAttemptRunTask(stranger, 1, nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.insp.DeleteQueue(queue.WorkerQueue(stranger), true) })

	res, err := f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Dead)
	require.Equal(t, 1, res.Lost)
	require.GreaterOrEqual(t, res.QueuesDeleted, 1)
	require.False(t, f.hasQueue(t, silent.ID), "the dead worker's queue is removed")
	require.True(t, f.hasQueue(t, alive.ID))
	require.True(t, f.hasQueue(t, stranger), "an unknown worker's queue with tasks is left alone")

	task := f.task(t, lost.ID)
	require.Equal(t, domain.TaskPending, task.State, "requeued at once")
	require.Equal(t, 1, task.PreemptionCount)
	require.Zero(t, task.FailureCount)
	require.Equal(t, domain.TaskRunning, f.task(t, kept.ID).State)

	again, err := f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, again.Dead+again.Lost)
}

func TestEvaluationRecordsWorkerFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		table   domain.Table
		deleted bool
	}{
		{"the failure backs the worker off", domain.Table{0, time.Hour}, false},
		{"one failure too many deletes the worker and its queue", domain.Table{0}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newLiveFixture(t, tt.table)
			w := f.register(t)
			lost, other := f.running(t, w, "lost"), f.running(t, w, "other")
			_, err := storetest.ReportAttempt(ctx, f.st, lost.ID, store.Report{State: domain.TaskWorkerFailed, Cause: "worker_lost"})
			require.NoError(t, err)

			_, err = f.s.evaluate(ctx, lost.ID)
			require.NoError(t, err)
			require.Equal(t, domain.TaskPending, f.task(t, lost.ID).State)
			ws, err := f.st.Placement().PlaceableWorkers(ctx, time.Minute)
			require.NoError(t, err)
			require.Empty(t, ws, "no new work on the worker that lost it")
			ws, err = f.st.Workers().ListWorkers(ctx)
			require.NoError(t, err)
			if !tt.deleted {
				require.Len(t, ws, 1)
				require.WithinDuration(t, time.Now().Add(time.Hour), *ws[0].PlaceableAfter, time.Minute)
				require.True(t, f.hasQueue(t, w.ID))
				return
			}
			require.Empty(t, ws)
			require.False(t, f.hasQueue(t, w.ID))
			r, err := f.st.Attempts().GetAttemptRun(ctx, other.ID)
			require.NoError(t, err)
			require.Equal(t, domain.TaskWorkerFailed, r.Attempt.State, "the deleted worker's other attempt is lost too")
		})
	}
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
		{"WORKER_FAILED (worker lost) counts", reportWorkerLost, true},
		{"FAILED with cause system counts", reportSystemFail, true},
		{"FAILED with cause user is the task's fault", reportUserFail, false},
		{"SUCCEEDED does not count", reportSucceeded, false},
		{"KILLED by an abort does not count", reportKilledAbort, false},
	}
	f := newRunFixture(t, domain.ARCTable)
	tasks := f.startedTasks(t, "kinds", len(tests))
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := f.register(t)
			a := f.attemptIn(t, w, tasks[i], reportRunning, tt.final)
			require.NoError(t, f.s.recordWorkerFailure(context.Background(), a.ID))
			got, ok := f.worker(t, w.ID)
			require.True(t, ok)
			if !tt.counts {
				require.Empty(t, got.Failures)
				require.Nil(t, got.PlaceableAfter)
				require.Nil(t, got.LastFailureAt)
				return
			}
			require.Len(t, got.Failures, 1, "recorded on the attempt's worker")
			require.Contains(t, got.Failures, strconv.FormatInt(a.ID, 10))
			require.WithinDuration(t, f.finishedAt(t, a.ID), got.Failures[strconv.FormatInt(a.ID, 10)], time.Millisecond)
			require.NotNil(t, got.LastFailureAt)
		})
	}
}

// TestFailureBackoffFollowsARCTable checks ARC's rule (actions-runner-controller
// PR #4059):
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
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	tasks := f.startedTasks(t, "arc", 7)
	bystander := f.attemptIn(t, w, tasks[6], reportRunning)

	steps := []struct {
		n     int
		delay time.Duration
	}{{1, 5 * time.Second}, {2, 10 * time.Second}, {3, 20 * time.Second}, {4, 40 * time.Second}, {5, 80 * time.Second}}
	for i, step := range steps {
		a := f.attemptIn(t, w, tasks[i], reportRunning, reportWorkerLost)
		require.NoError(t, f.s.recordWorkerFailure(ctx, a.ID))
		got, ok := f.worker(t, w.ID)
		require.True(t, ok, "failure %d: not deleted", step.n)
		require.Len(t, got.Failures, step.n)
		require.NotNil(t, got.PlaceableAfter)
		require.WithinDuration(t, f.finishedAt(t, a.ID).Add(step.delay), *got.PlaceableAfter, time.Millisecond,
			"failure %d: wait failedRunnerBackoff[%d] after the last one", step.n, step.n)
		require.WithinDuration(t, f.finishedAt(t, a.ID), *got.LastFailureAt, time.Millisecond)
		require.False(t, f.placeable(t, w.ID), "no new work during the backoff")

		require.NoError(t, f.s.recordWorkerFailure(ctx, a.ID))
		again, _ := f.worker(t, w.ID)
		require.Len(t, again.Failures, step.n, "recording an attempt twice counts it once")
	}

	sixth := f.attemptIn(t, w, tasks[5], reportRunning, reportSystemFail)
	require.NoError(t, f.s.recordWorkerFailure(ctx, sixth.ID))
	_, ok := f.worker(t, w.ID)
	require.False(t, ok, "past maxFailures the worker is deleted: never left as a failed zombie holding capacity")
	lost := f.attempt(t, bystander.ID)
	require.Equal(t, domain.TaskWorkerFailed, lost.State, "what it still ran is lost")
	require.Equal(t, "worker_lost", *lost.Cause)
	require.Equal(t, "the worker was deleted after 6 failures", *lost.Error)
	require.Nil(t, lost.EvaluatedAt, "queued for its evaluation")
	_, err := storetest.Heartbeat(ctx, f.st, w.ID, storetest.Beat{})
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
			f := newRunFixture(t, tt.table)
			w := f.register(t)
			a := f.attemptIn(t, w, f.startedTasks(t, "shrunk", 1)[0], reportRunning, reportWorkerLost)
			require.NoError(t, f.s.recordWorkerFailure(ctx, a.ID))
			_, ok := f.worker(t, w.ID)
			require.Equal(t, tt.deleted, !ok)
			require.Equal(t, tt.placeable, f.placeable(t, w.ID))
		})
	}
}

// TestReapDeadWorkers: "Set by the controller when a worker dies.
// _on_worker_failed iterates all tasks on the dead worker and emits
// TaskStateChangedEvent with TASK_STATE_WORKER_FAILED for each non-terminal
// task. Retry evaluation uses the preemption budget" (Iris's task-states
// reference, WORKER_FAILED).
func TestReapDeadWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	dead, alive := f.register(t), f.register(t)
	tasks := f.startedTasks(t, "reap", 3)
	runningOnDead := f.attemptIn(t, dead, tasks[0], reportRunning)
	assignedOnDead := f.attemptIn(t, dead, tasks[1])
	onAlive := f.attemptIn(t, alive, tasks[2], reportRunning)

	_, err := storetest.Heartbeat(ctx, f.st, dead.ID, storetest.Beat{Held: []int64{runningOnDead.ID}})
	require.NoError(t, err)
	f.silence(t, dead.ID, 2*f.s.cfg.WorkerGrace)
	_, err = storetest.Heartbeat(ctx, f.st, alive.ID, storetest.Beat{Held: []int64{onAlive.ID}})
	require.NoError(t, err)
	f.watched(t)
	r, err := f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, r.Dead)
	require.Equal(t, 2, r.Lost, "the alive worker's attempt is left alone")
	require.Equal(t, domain.TaskRunning, f.attempt(t, onAlive.ID).State)

	for _, id := range []int64{runningOnDead.ID, assignedOnDead.ID} {
		a := f.attempt(t, id)
		require.Equal(t, domain.TaskWorkerFailed, a.State)
		require.Equal(t, "worker_lost", *a.Cause)
		require.NotNil(t, a.FinishedAt)
		require.NotNil(t, a.EvaluatedAt, "evaluated by the pass")
		require.Equal(t, 1, f.events(t, "task."+domain.ShouldRetry.String(), id))
		task := f.task(t, id)
		require.Equal(t, domain.TaskPending, task.State, "requeued within its preemption budget")
		require.Equal(t, 1, task.PreemptionCount)
		require.Zero(t, task.FailureCount, "never charged to the failure budget")
	}
	w, ok := f.worker(t, dead.ID)
	require.True(t, ok)
	require.Equal(t, store.WorkerDead, w.State)
	require.Len(t, w.Failures, 2, "the lost attempts are recorded on the dead worker")
	require.False(t, f.placeable(t, dead.ID))
	_, err = storetest.Heartbeat(ctx, f.st, dead.ID, storetest.Beat{})
	require.ErrorIs(t, err, store.ErrNotFound, "a worker back from the dead must re-register")
	w, _ = f.worker(t, alive.ID)
	require.Equal(t, store.WorkerAlive, w.State)

	again, err := f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, again.Dead)
	require.Zero(t, again.Lost)

	n, err := f.st.Workers().DeleteDeadWorkers(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "kept for the retention")
	n, err = f.st.Workers().DeleteDeadWorkers(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestDeadWorkerListedUntilRetention: a worker declared dead stays listed,
// dead, until Liveness.DeadRetention has passed since it died; the pass
// after that deletes its row. A purge that ignored the retention would
// delete it in the pass that declared it dead; one that kept a period of its
// own would not delete it before the deadline. The retention is shrunk to
// 1s and the passes are polled.
func TestDeadWorkerListedUntilRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const retention = time.Second
	f := newLiveFixtureWith(t, LivenessConfig{Backoff: domain.ARCTable, DeadRetention: retention})
	silent, alive := f.register(t), f.register(t)
	f.silence(t, silent.ID, 2*f.s.cfg.WorkerGrace)
	f.watched(t)

	beforeDeath := time.Now()
	res, err := f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Dead)
	require.Zero(t, res.Purged)
	w, ok := f.worker(t, silent.ID)
	require.True(t, ok, "a dead worker is listed for the retention")
	require.Equal(t, store.WorkerDead, w.State)

	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := f.s.livenessOnce(ctx)
		require.NoError(t, err)
		ended := time.Since(beforeDeath) // after the pass's cutoff was taken
		w, listed := f.worker(t, silent.ID)
		if !listed {
			require.EqualValues(t, 1, res.Purged)
			require.GreaterOrEqual(t, ended, retention, "purged before the retention passed")
			break
		}
		require.Equal(t, store.WorkerDead, w.State, "listed as dead until purged")
		require.Zero(t, res.Purged)
		require.True(t, time.Now().Before(deadline), "still listed %s after it died", ended)
		<-tick.C
	}
	w, ok = f.worker(t, alive.ID)
	require.True(t, ok, "an alive worker is never purged")
	require.Equal(t, store.WorkerAlive, w.State)
}

// TestReapEndsAttemptsOfMissingWorkers: an attempt placed on a worker that
// died or was deleted meanwhile is not left ASSIGNED forever.
func TestReapEndsAttemptsOfMissingWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	tasks := f.startedTasks(t, "missing", 1)
	_, err := f.st.Workers().DeregisterWorker(ctx, w.ID)
	require.NoError(t, err)
	a, ok, err := storetest.AssignTask(ctx, f.st, tasks[0], w.ID) // raced with the deregistration
	require.NoError(t, err)
	require.True(t, ok)

	r, err := f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, r.Dead)
	require.Equal(t, 1, r.Lost)
	lost := f.attempt(t, a.ID)
	require.Equal(t, domain.TaskWorkerFailed, lost.State)
	require.Equal(t, "worker_lost", *lost.Cause)
	require.Equal(t, domain.TaskPending, f.task(t, a.ID).State, "requeued")
}
