package scheduler

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// liveRedisDB is the Redis database of these tests: the queue sweep deletes the
// worker queues it does not know, so it must not share one with the
// executor's tests (0), e2e (1-13) or the api's (14).
const liveRedisDB = 15

type liveFixture struct {
	s     *Scheduler
	st    *store.Store
	queue *asynq.Client
	insp  *asynq.Inspector
}

func newLiveFixture(t *testing.T, table domain.Table) *liveFixture {
	t.Helper()
	redis := asynq.RedisClientOpt{Addr: cmp.Or(os.Getenv("CAPSTAN_REDIS_ADDR"), "127.0.0.1:56379"), DB: liveRedisDB}
	f := &liveFixture{st: storetest.New(t), queue: asynq.NewClient(redis), insp: asynq.NewInspector(redis)}
	t.Cleanup(func() { f.queue.Close(); f.insp.Close() })
	log := slog.New(slog.DiscardHandler)
	f.s = New(f.st, queue.NewEnqueuer(f.queue, log), log, prometheus.NewRegistry(), Config{
		WorkerGrace: time.Minute, Retry: domain.Table{0},
		Liveness: LivenessConfig{Backoff: table, Queues: f.insp}})
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
	_, _, err := f.st.CreateRun(ctx, store.NewRun{Key: key, Spec: spec})
	require.NoError(t, err)
	_, err = f.st.AdvanceRun(ctx, key)
	require.NoError(t, err)
	d, err := f.st.GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	a, ok, err := f.st.AssignTask(ctx, d.Tasks[0].Task.ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = f.st.ReportAttempt(ctx, a.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)
	_, err = f.queue.Enqueue(queue.NewAttemptRunTask(w.ID, a.ID))
	require.NoError(t, err)
	return a
}

func (f *liveFixture) register(t *testing.T) store.Worker {
	t.Helper()
	w, err := f.st.RegisterWorker(context.Background(), store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 4})
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
	r, err := f.st.GetAttemptRun(context.Background(), attemptID)
	require.NoError(t, err)
	return r.Task
}

// Not parallel: its queue sweep deletes every worker queue of liveRedisDB that
// its own database does not know, the other tests' included.
func TestLivenessPassDeclaresSilentWorkersDead(t *testing.T) {
	ctx := context.Background()
	f := newLiveFixture(t, domain.ARCTable)
	silent, alive := f.register(t), f.register(t)
	lost, kept := f.running(t, silent, "lost"), f.running(t, alive, "kept")
	_, err := f.st.BeatWorker(ctx, silent.ID, store.Beat{Held: []int64{lost.ID}, At: time.Now().Add(-2 * time.Minute)})
	require.NoError(t, err)
	require.True(t, f.hasQueue(t, silent.ID))
	stranger := uuid.NewString() // a worker of another Capstan on this Redis
	_, err = f.queue.Enqueue(queue.NewAttemptRunTask(stranger, 1))
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
	require.Equal(t, int16(domain.TaskPending), task.State, "requeued at once")
	require.Equal(t, 1, task.PreemptionCount)
	require.Zero(t, task.FailureCount)
	require.Equal(t, int16(domain.TaskRunning), f.task(t, kept.ID).State)

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
			_, err := f.st.ReportAttempt(ctx, lost.ID, store.Report{State: domain.TaskWorkerFailed, Cause: "worker_lost"})
			require.NoError(t, err)

			require.NoError(t, f.s.evaluate(ctx, lost.ID))
			require.Equal(t, int16(domain.TaskPending), f.task(t, lost.ID).State)
			ws, err := f.st.PlaceableWorkers(ctx, time.Minute)
			require.NoError(t, err)
			require.Empty(t, ws, "no new work on the worker that lost it")
			ws, err = f.st.ListWorkers(ctx)
			require.NoError(t, err)
			if !tt.deleted {
				require.Len(t, ws, 1)
				require.WithinDuration(t, time.Now().Add(time.Hour), *ws[0].PlaceableAfter, time.Minute)
				require.True(t, f.hasQueue(t, w.ID))
				return
			}
			require.Empty(t, ws)
			require.False(t, f.hasQueue(t, w.ID))
			r, err := f.st.GetAttemptRun(ctx, other.ID)
			require.NoError(t, err)
			require.Equal(t, int16(domain.TaskWorkerFailed), r.Attempt.State, "the deleted worker's other attempt is lost too")
		})
	}
}
