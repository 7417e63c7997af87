package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// raceRounds is how long TestLockOrderUnderRace keeps its goroutines busy,
// in rounds of each. Shrink it with CAPSTAN_TEST_RACE_ROUNDS.
var raceRounds = 40

// TestLockOrderUnderRace races every transaction that locks more than one
// row — aborts of steps and of the run, evaluation with its run advance,
// advances, batched starts, placement (a fresh run's in its start, and the
// passes'), preemption-free passes, dead-worker reaping, heartbeats and
// deregistration — on the same runs from many goroutines
// against the real Postgres. Every one takes its locks in the documented
// order (run → action → task → attempt → worker, each level in key order),
// so Postgres never has to break a deadlock (SQLSTATE 40P01); and the end
// state is consistent: each run and action terminal, the run's phase its
// a0's, no task unfinished, each task's attempts numbered 1..attempt_count
// with only the current one possibly live (its kill is the reconciler's).
func TestLockOrderUnderRace(t *testing.T) {
	t.Parallel()
	r := newRacer(t)
	r.start(t, "evaluate", r.evaluateSome)
	r.start(t, "evaluate", r.evaluateSome)
	r.start(t, "evaluate", r.evaluateSome)
	r.start(t, "batch", r.batchSome)
	r.start(t, "batch", r.batchSome)
	r.start(t, "together", r.evaluateTogether)
	r.start(t, "together", r.evaluateTogether)
	r.start(t, "advance", r.advanceSome)
	r.start(t, "start", r.startSome)
	r.start(t, "place", r.placeSome)
	r.start(t, "reap", r.reapSome)
	r.start(t, "beat", r.beatSome)
	r.start(t, "abort", r.abortSome)
	r.wg.Wait()
	r.finish(t)
	r.requireConsistent(t)
}

// racer is the state TestLockOrderUnderRace's goroutines share.
type racer struct {
	s    *Scheduler
	st   *store.Store
	db   *sql.DB
	runs []domain.RunKey
	wg   sync.WaitGroup

	mu      sync.Mutex
	workers []string
	errs    []error
}

func newRacer(t *testing.T) *racer {
	t.Helper()
	if n := os.Getenv("CAPSTAN_TEST_RACE_ROUNDS"); n != "" {
		_, _ = fmt.Sscan(n, &raceRounds)
	}
	redis := redistest.New(t)
	client := asynq.NewClient(redis)
	t.Cleanup(func() { client.Close() })
	r := &racer{}
	r.st, r.db = storetest.NewWithDB(t, store.Config{MaxOpenConns: 10})
	// A batched evaluation that fails is retried one by one and only
	// logged: its deadlocks are caught here.
	log := slog.New(deadlockLog{r})
	r.s = New(r.st, queue.NewEnqueuer(client, log), log, prometheus.NewRegistry(), Config{
		WorkerGrace: time.Minute, Retry: domain.Table{0}, Liveness: LivenessConfig{Backoff: domain.Table{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}})
	ctx := context.Background()
	// The leader's: a run's first advance binds its first tasks
	// (freshPlacement), racing the passes, the batched starts and the rest.
	r.s.setLeader(true)
	for i := range 6 {
		key := domain.RunKey{Project: "p", Domain: "d", Run: fmt.Sprintf("race-%d", i)}
		_, _, err := r.st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: raceSpec()})
		require.NoError(t, err)
		r.runs = append(r.runs, key)
	}
	for range 3 {
		r.register(t)
	}
	require.NoError(t, storetest.Watched(ctx, r.db, time.Hour))
	return r
}

// deadlockLog is a slog.Handler that records, as the racer's errors, the
// deadlocks (SQLSTATE 40P01) logged as an "err" attribute.
type deadlockLog struct{ r *racer }

func (deadlockLog) Enabled(context.Context, slog.Level) bool { return true }
func (h deadlockLog) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h deadlockLog) WithGroup(string) slog.Handler          { return h }

func (h deadlockLog) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		var pgErr *pgconn.PgError
		if err, ok := a.Value.Any().(error); ok && errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			h.r.mu.Lock()
			h.r.errs = append(h.r.errs, fmt.Errorf("%s: %w", rec.Message, err))
			h.r.mu.Unlock()
		}
		return true
	})
	return nil
}

// raceSpec is a DAG of replicated steps, with retries, a tolerated failure
// and a gang, so that evaluations requeue, fail, cascade and advance.
func raceSpec() domain.WorkflowSpec {
	n := func(v int) *int { return &v }
	spec := domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		{Name: "a", Plugin: domain.PluginNoop, Replicas: n(6), MaxRetriesFailure: n(2)},
		{Name: "b", Plugin: domain.PluginNoop, Replicas: n(4), MaxTaskFailures: n(1)},
		{Name: "c", Plugin: domain.PluginNoop, Replicas: n(3), Coscheduled: true, DependsOn: []string{"a"}},
		{Name: "d", Plugin: domain.PluginNoop, Replicas: n(4), DependsOn: []string{"b", "c"}, MaxRetriesFailure: n(1)},
		{Name: "e", Plugin: domain.PluginNoop, Replicas: n(2), DependsOn: []string{"d"}},
	}}
	spec.Normalize()
	return spec
}

func (r *racer) register(t *testing.T) {
	w, err := r.st.Workers().RegisterWorker(context.Background(), store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	require.NoError(t, err)
	r.mu.Lock()
	r.workers = append(r.workers, w.ID)
	r.mu.Unlock()
}

// start runs fn raceRounds times in a goroutine; fn's errors are recorded.
func (r *racer) start(t *testing.T, name string, fn func(ctx context.Context, rng *rand.Rand) error) {
	r.wg.Add(1)
	seed := uint64(len(name)) + uint64(time.Now().UnixNano())
	go func() {
		defer r.wg.Done()
		ctx, rng := context.Background(), rand.New(rand.NewPCG(seed, 7))
		for range raceRounds {
			if err := fn(ctx, rng); err != nil {
				r.mu.Lock()
				r.errs = append(r.errs, fmt.Errorf("%s: %w", name, err))
				r.mu.Unlock()
			}
		}
	}()
}

// liveAttempts returns the live attempts of the runs.
func (r *racer) liveAttempts(ctx context.Context) ([]store.Attempt, error) {
	var out []store.Attempt
	for _, k := range r.runs {
		d, err := r.st.Runs().GetRun(ctx, k)
		if err != nil {
			return nil, err
		}
		for _, a := range d.Actions {
			for _, tk := range a.Tasks {
				for _, at := range tk.Attempts {
					if at.State.IsLive() {
						out = append(out, at)
					}
				}
			}
		}
	}
	return out, nil
}

// evaluateSome ends a live attempt (RUNNING, then SUCCEEDED or FAILED) and
// evaluates it, as an executor's report and the scheduler's queue would.
func (r *racer) evaluateSome(ctx context.Context, rng *rand.Rand) error {
	live, err := r.liveAttempts(ctx)
	if err != nil || len(live) == 0 {
		return err
	}
	a := live[rng.IntN(len(live))]
	if _, err := storetest.ReportAttempt(ctx, r.st, a.ID, store.Report{State: domain.TaskRunning}); err != nil &&
		!errors.Is(err, store.ErrBadReport) {
		return err
	}
	final, exit := domain.TaskSucceeded, 0
	if rng.IntN(4) == 0 {
		final, exit = domain.TaskFailed, 1
	}
	if _, err := storetest.ReportAttempt(ctx, r.st, a.ID, store.Report{State: final, ExitCode: &exit, Cause: "user"}); err != nil {
		return err
	}
	_, err = r.s.evaluate(ctx, a.ID)
	return err
}

// batchSome reports on up to four live attempts of one worker in one
// batch, in a random order (RUNNING, output, then the end of each), as an
// executor's batch does, and evaluates those that ended as the api's one
// tasks:evaluate message does (the SUCCEEDED ones of different runs in one
// transaction); one batch in three carries only their output.
func (r *racer) batchSome(ctx context.Context, rng *rand.Rand) error {
	live, err := r.liveAttempts(ctx)
	if err != nil || len(live) == 0 {
		return err
	}
	worker := live[rng.IntN(len(live))].WorkerID
	var mine []store.Attempt
	for _, a := range live {
		if a.WorkerID != nil && worker != nil && *a.WorkerID == *worker && len(mine) < 4 {
			mine = append(mine, a)
		}
	}
	rng.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
	exit := 0
	var batch []store.BatchedReport
	logsOnly := rng.IntN(3) == 0 // output of running attempts, in no id order
	for _, a := range mine {
		if logsOnly {
			batch = append(batch, store.BatchedReport{AttemptID: a.ID, Logs: []store.NewLogChunk{{Stream: "stdout", Data: "out\n"}}})
			continue
		}
		batch = append(batch, store.BatchedReport{AttemptID: a.ID, Report: store.Report{State: domain.TaskRunning}},
			store.BatchedReport{AttemptID: a.ID, Logs: []store.NewLogChunk{{Stream: "stdout", Data: "out\n"}}},
			store.BatchedReport{AttemptID: a.ID, Report: store.Report{State: domain.TaskSucceeded, ExitCode: &exit}})
	}
	if len(batch) == 0 {
		return nil
	}
	res, err := storetest.ReportAttempts(ctx, r.st, *worker, batch, 1<<20)
	if err != nil {
		return err
	}
	var ended []int64
	for i, b := range res {
		if b.Evaluate {
			ended = append(ended, batch[i].AttemptID)
		}
	}
	if len(ended) == 0 {
		return nil
	}
	return r.s.handleEvaluations(ctx, queue.NewTasksEvaluateTask(ended))
}

// evaluateTogether ends up to four live attempts, of any runs and
// workers, SUCCEEDED but one in four, and evaluates them as one
// tasks:evaluate message: all of them in one transaction
// (evaluateAttempts), each alone when they cannot be settled together.
func (r *racer) evaluateTogether(ctx context.Context, rng *rand.Rand) error {
	live, err := r.liveAttempts(ctx)
	if err != nil || len(live) == 0 {
		return err
	}
	rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	var ended []int64
	for _, a := range live[:min(len(live), 4)] {
		final, exit := domain.TaskSucceeded, 0
		if rng.IntN(4) == 0 {
			final, exit = domain.TaskFailed, 1
		}
		if _, err := storetest.ReportAttempt(ctx, r.st, a.ID, store.Report{State: final, ExitCode: &exit, Cause: "user"}); err != nil {
			if errors.Is(err, store.ErrBadReport) {
				continue // ended meanwhile
			}
			return err
		}
		ended = append(ended, a.ID)
	}
	if len(ended) == 0 {
		return nil
	}
	return r.s.handleEvaluations(ctx, queue.NewTasksEvaluateTask(ended))
}

func (r *racer) advanceSome(ctx context.Context, rng *rand.Rand) error {
	_, err := r.s.advance(ctx, r.runs[rng.IntN(len(r.runs))])
	return err
}

// startSome starts two runs together, as the start gate does (startRuns):
// on their first advance, their expansions and placements share a
// transaction.
func (r *racer) startSome(ctx context.Context, rng *rand.Rand) error {
	keys := []domain.RunKey{r.runs[rng.IntN(len(r.runs))], r.runs[rng.IntN(len(r.runs))]}
	return errors.Join(r.s.startRuns(ctx, keys)...)
}

func (r *racer) placeSome(ctx context.Context, _ *rand.Rand) error {
	_, err := r.s.runOnce(ctx)
	return err
}

// reapSome now and then makes a worker silent past its grace, registers a
// new one, and runs the dead-worker pass.
func (r *racer) reapSome(ctx context.Context, rng *rand.Rand) error {
	if rng.IntN(8) == 0 {
		r.mu.Lock()
		id := r.workers[rng.IntN(len(r.workers))]
		r.mu.Unlock()
		if err := storetest.Silence(ctx, r.db, id, time.Hour); err != nil {
			return err
		}
		w, err := r.st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.workers = append(r.workers, w.ID)
		r.mu.Unlock()
	}
	if err := r.st.Workers().StampHeartbeatPath(ctx); err != nil { // the api's, while it serves
		return err
	}
	_, err := r.s.livenessOnce(ctx)
	return err
}

// beatSome heartbeats a worker with the attempts it holds, and now and then
// deregisters one.
func (r *racer) beatSome(ctx context.Context, rng *rand.Rand) error {
	live, err := r.liveAttempts(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	id := r.workers[rng.IntN(len(r.workers))]
	r.mu.Unlock()
	var held []int64
	for _, a := range live {
		if a.WorkerID != nil && *a.WorkerID == id {
			held = append(held, a.ID)
		}
	}
	if rng.IntN(10) == 0 {
		_, err = r.st.Workers().DeregisterWorker(ctx, id)
	} else {
		_, err = storetest.Heartbeat(ctx, r.st, id, storetest.Beat{Held: held})
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// abortSome now and then aborts a step of a run.
func (r *racer) abortSome(ctx context.Context, rng *rand.Rand) error {
	if rng.IntN(6) != 0 {
		return nil
	}
	steps := raceSpec().Steps
	key := r.runs[rng.IntN(len(r.runs))].Action(steps[rng.IntN(len(steps))].Name)
	_, err := r.st.Aborts().AbortAction(ctx, key, "race", "")
	if errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// finish aborts what is still running, so every run ends, and requires that
// no goroutine met a deadlock or any other error.
func (r *racer) finish(t *testing.T) {
	ctx := context.Background()
	for _, k := range r.runs {
		_, err := r.st.Aborts().AbortAction(ctx, k.Action(domain.RootActionName), "race over", "")
		if !errors.Is(err, store.ErrTerminal) {
			require.NoError(t, err)
		}
	}
	for _, err := range r.errs {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			t.Errorf("deadlock: %v", err)
		}
	}
	require.Empty(t, r.errs)
}

// requireConsistent checks the end state of every run.
func (r *racer) requireConsistent(t *testing.T) {
	ctx := context.Background()
	for _, k := range r.runs {
		d, err := r.st.Runs().GetRun(ctx, k)
		require.NoError(t, err)
		require.True(t, domain.Phase(d.Run.Phase).IsTerminal(), "run %s ends terminal: %s", k, d.Run.Phase)
		require.Equal(t, d.Run.Phase, d.Actions[0].Action.Phase, "run %s: its phase is a0's", k)
		for _, a := range d.Actions {
			require.True(t, domain.Phase(a.Action.Phase).IsTerminal(), "action %s/%s: %s", k, a.Action.Name, a.Action.Phase)
			for _, tk := range a.Tasks {
				requireTaskConsistent(t, tk)
			}
		}
	}
}

func requireTaskConsistent(t *testing.T, tk store.TaskDetail) {
	name := fmt.Sprintf("task %d (%s/%d)", tk.Task.ID, tk.Task.ActionName, tk.Task.Idx)
	require.True(t, tk.Task.State.IsTerminal(), "%s: finished, is %s", name, tk.Task.State)
	require.Len(t, tk.Attempts, tk.Task.AttemptCount, "%s: one attempt per attempt_count", name)
	for i, a := range tk.Attempts {
		require.Equal(t, i+1, a.Number, "%s: attempts numbered in order", name)
		if a.State.IsLive() {
			require.Equal(t, tk.Task.AttemptCount, a.Number, "%s: only its current attempt may be live", name)
		}
	}
}
