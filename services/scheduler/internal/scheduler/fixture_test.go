package scheduler

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/hibiken/asynq"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// runFixture is a scheduler on a fresh database, with that database also
// open through database/sql for the tests that read rows (run_events). Its
// retries have no backoff delay; its workers back off after failures by
// the table it is given; it deletes no queue. Its store counts its
// statements by operation (statements, see statementCounts).
type runFixture struct {
	*liveFixture
	statements *prometheus.HistogramVec
}

func newRunFixture(t *testing.T, table domain.Table) *runFixture {
	t.Helper()
	ctx := context.Background()
	url := storetest.NewURL(t)
	statements := store.NewOperationSeconds()
	st, err := store.Open(ctx, url, store.Config{MaxOpenConns: 10, OperationSeconds: statements})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	redis := redistest.New(t)
	lf := &liveFixture{st: st, db: db, queue: asynq.NewClient(redis), insp: asynq.NewInspector(redis)}
	t.Cleanup(func() { lf.queue.Close(); lf.insp.Close() })
	log := slog.New(slog.DiscardHandler)
	lf.s = New(st, queue.NewEnqueuer(lf.queue, log), log, prometheus.NewRegistry(), Config{
		WorkerGrace: time.Minute, Retry: domain.Table{0}, Liveness: LivenessConfig{Backoff: table},
		ControlPlaneKey: testControlPlaneKey})
	return &runFixture{liveFixture: lf, statements: statements}
}

// testControlPlaneKey is the run fixture's ControlPlaneKey, which its
// dispatched specs are signed under (verifiedSpecs).
var testControlPlaneKey = workerkey.New("test-control-plane-key-0123456789abcdef")

// verifiedSpecs returns the specs of a dispatch message to worker, each
// verified under that worker's dispatch key.
func verifiedSpecs(t *testing.T, worker string, signed []queue.SignedSpec) []workerapi.AttemptSpec {
	t.Helper()
	out := make([]workerapi.AttemptSpec, len(signed))
	for i, s := range signed {
		var err error
		out[i], err = s.Verify(testControlPlaneKey.DispatchKey(worker))
		require.NoError(t, err)
	}
	return out
}

// Reports an executor makes.
var (
	reportBuilding    = store.Report{State: domain.TaskBuilding}
	reportRunning     = store.Report{State: domain.TaskRunning}
	reportWorkerLost  = store.Report{State: domain.TaskWorkerFailed, Cause: "worker_lost"}
	reportSystemFail  = store.Report{State: domain.TaskFailed, Cause: "system", Error: "cannot create the work dir"}
	reportUserFail    = store.Report{State: domain.TaskFailed, Cause: "user", ExitCode: iptr(1)}
	reportSucceeded   = store.Report{State: domain.TaskSucceeded, ExitCode: iptr(0)}
	reportKilledAbort = store.Report{State: domain.TaskKilled, Cause: "aborted"}
	reportPreempted   = store.Report{State: domain.TaskPreempted, Cause: "preempted"}
)

func iptr(v int) *int { return &v }

// newRun creates run name of spec (normalized, valid) in project p, domain d.
func (f *runFixture) newRun(t *testing.T, name string, spec domain.WorkflowSpec) domain.RunKey {
	t.Helper()
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	key := domain.RunKey{Project: "p", Domain: "d", Run: name}
	_, created, err := f.st.Runs().CreateRun(context.Background(), store.NewRun{Key: key, Spec: spec})
	require.NoError(t, err)
	require.True(t, created)
	return key
}

// tasks returns an action's tasks with their attempts.
func (f *runFixture) tasks(t *testing.T, key domain.RunKey, action string) []store.TaskDetail {
	t.Helper()
	d, err := f.st.Actions().GetAction(context.Background(), key.Action(action))
	require.NoError(t, err)
	return d.Tasks
}

// startedTasks creates a run of one step with n replicas, advances it, and
// returns its task ids.
func (f *runFixture) startedTasks(t *testing.T, name string, n int) []int64 {
	t.Helper()
	key := f.newRun(t, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Replicas: iptr(n)}}})
	_, err := f.s.advance(context.Background(), key)
	require.NoError(t, err)
	var ids []int64
	for _, td := range f.tasks(t, key, "s") {
		ids = append(ids, td.Task.ID)
	}
	require.Len(t, ids, n)
	return ids
}

// attemptIn assigns the task to w and reports the attempt through reps.
func (f *runFixture) attemptIn(t *testing.T, w store.Worker, taskID int64, reps ...store.Report) store.Attempt {
	t.Helper()
	ctx := context.Background()
	a, ok, err := storetest.AssignTask(ctx, f.st, taskID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	for _, rep := range reps {
		_, err := storetest.ReportAttempt(ctx, f.st, a.ID, rep)
		require.NoError(t, err)
	}
	return a
}

// runAttempt assigns the task, reports RUNNING then the final state, and
// evaluates the attempt (twice: the second changes nothing).
func (f *runFixture) runAttempt(t *testing.T, w store.Worker, taskID int64, final domain.TaskState, exit int) Evaluation {
	t.Helper()
	ctx := context.Background()
	a, ok, err := storetest.AssignTask(ctx, f.st, taskID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	res, err := storetest.ReportAttempt(ctx, f.st, a.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)
	require.True(t, res.Proceed)
	res, err = storetest.ReportAttempt(ctx, f.st, a.ID, store.Report{State: final, ExitCode: &exit, Cause: "user"})
	require.NoError(t, err)
	require.True(t, res.Evaluate)
	ev, err := f.s.evaluate(ctx, a.ID)
	require.NoError(t, err)
	require.True(t, ev.Done)
	again, err := f.s.evaluate(ctx, a.ID)
	require.NoError(t, err)
	require.False(t, again.Done, "evaluation is idempotent")
	return ev
}

// attempt returns an attempt's row.
func (f *runFixture) attempt(t *testing.T, id int64) store.Attempt {
	t.Helper()
	a, err := f.st.Attempts().GetAttempt(context.Background(), id)
	require.NoError(t, err)
	return a
}

// finishedAt returns when an attempt finished.
func (f *runFixture) finishedAt(t *testing.T, attemptID int64) time.Time {
	t.Helper()
	a := f.attempt(t, attemptID)
	require.NotNil(t, a.FinishedAt)
	return *a.FinishedAt
}

// worker returns a worker with its load; ok is false when its row is gone.
func (f *liveFixture) worker(t *testing.T, id string) (w store.WorkerLoad, ok bool) {
	t.Helper()
	ws, err := f.st.Workers().ListWorkers(context.Background())
	require.NoError(t, err)
	for _, w := range ws {
		if w.ID == id {
			return w, true
		}
	}
	return store.WorkerLoad{}, false
}

// placeable reports whether a placement pass would consider worker id.
func (f *runFixture) placeable(t *testing.T, id string) bool {
	t.Helper()
	ws, err := f.st.Placement().PlaceableWorkers(context.Background(), time.Hour)
	require.NoError(t, err)
	for _, w := range ws {
		if w.ID == id {
			return true
		}
	}
	return false
}

// events counts the run_events rows of type typ about attempt attemptID (0:
// of any attempt, or none).
func (f *runFixture) events(t *testing.T, typ string, attemptID int64) int {
	t.Helper()
	var n int
	require.NoError(t, f.db.QueryRow(`SELECT count(*) FROM run_events WHERE type = $1
		AND ($2 = 0 OR attempt_id = $2)`, typ, attemptID).Scan(&n))
	return n
}
