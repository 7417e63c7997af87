package reconciler

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// Failure, then retry with backoff, then success: Flyte's AbortReconciler
// backs off with full jitter; the count survives in Postgres
// ("MarkAbortAttempt").
func TestDeliversAfterFailures(t *testing.T) {
	t.Parallel()
	const failures = 3
	h := newHarness(t, testConfig(), nil)
	exe := newFakeExecutor(t, failThenOK(failures))
	h.start()
	s := h.seedAbort(exe.URL(), 1)
	require.NoError(t, h.push(s.key))

	a := h.waitOutcome(s.key)
	require.Equal(t, store.AbortDelivered, *a.AbortOutcome)
	require.Equal(t, failures+1, a.AbortAttemptCount)
	calls := exe.Calls()
	require.Len(t, calls, failures+1)
	for _, c := range calls {
		require.Equal(t, s.attempts[0], c.AttemptID)
		require.Equal(t, "user asked", c.Reason)
		require.Equal(t, store.CauseAborted, c.Cause)
	}
	// A kill that succeeded is reported KILLED by the executor itself.
	require.Equal(t, domain.TaskRunning, h.attempt(s.key, s.attempts[0]).State)
	require.InDelta(t, 1, testutil.ToFloat64(h.rec.metrics.delivered.WithLabelValues(kindAction)), 0)
	require.InDelta(t, failures, testutil.ToFloat64(h.rec.metrics.retried.WithLabelValues(kindAction)), 0)
	h.waitQueueIdle()
}

// Flyte's AbortReconciler: after MaxAttempts it stops and logs that manual
// intervention may be required.
func TestGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxAttempts = 4
	h := newHarness(t, cfg, nil)
	exe := newFakeExecutor(t, always(http.StatusInternalServerError))
	h.start()
	s := h.seedAbort(exe.URL(), 1)
	require.NoError(t, h.push(s.key))

	a := h.waitOutcome(s.key)
	require.Equal(t, store.AbortNeedsIntervention, *a.AbortOutcome)
	require.Equal(t, cfg.MaxAttempts, a.AbortAttemptCount)
	require.Len(t, exe.Calls(), cfg.MaxAttempts)
	require.InDelta(t, 1, testutil.ToFloat64(h.rec.metrics.givenUp.WithLabelValues(kindAction)), 0)
	require.InDelta(t, cfg.MaxAttempts-1, testutil.ToFloat64(h.rec.metrics.retried.WithLabelValues(kindAction)), 0)
	// The task is done, not archived: nothing blocks a later push.
	h.waitQueueIdle()
	_, err := h.insp.GetTaskInfo(cfg.Queue, s.key.String())
	require.ErrorIs(t, err, asynq.ErrTaskNotFound)
}

// Flyte's isAlreadyTerminated: NotFound, or an internal error
// saying "not found", means the attempt is already gone.
func TestAlreadyTerminated(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		status int
		detail string
	}{
		"404":           {http.StatusNotFound, ""},
		"500 not found": {http.StatusInternalServerError, "kill: process group 4242 not found"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testConfig(), nil)
			exe := newFakeExecutor(t, always(tc.status))
			exe.detail500 = tc.detail
			h.start()
			s := h.seedAbort(exe.URL(), 1)
			require.NoError(t, h.push(s.key))

			a := h.waitOutcome(s.key)
			require.Equal(t, store.AbortDelivered, *a.AbortOutcome)
			require.Equal(t, 1, a.AbortAttemptCount)
			require.Len(t, exe.Calls(), 1)
			at := h.attempt(s.key, s.attempts[0])
			require.Equal(t, domain.TaskKilled, at.State)
			require.Equal(t, store.CauseAborted, *at.Cause)
			require.InDelta(t, 1, testutil.ToFloat64(h.rec.metrics.alreadyTerminated.WithLabelValues(kindAction)), 0)
		})
	}
}

// A timeout takes the abort path with its cause: the executor is told
// "timeout", and an attempt found gone is recorded KILLED with cause timeout.
func TestTimeoutCauseIsDelivered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig(), nil)
	exe := newFakeExecutor(t, func(id int64, _ int) int {
		if id%2 == 0 {
			return http.StatusNotFound
		}
		return http.StatusOK
	})
	h.start()
	s := h.seedAbortCause(exe.URL(), 2, store.CauseTimeout)
	require.Equal(t, string(domain.PhaseTimedOut), h.action(s.key).Phase)
	require.NoError(t, h.push(s.key))

	a := h.waitOutcome(s.key)
	require.Equal(t, store.AbortDelivered, *a.AbortOutcome)
	calls := exe.Calls()
	require.Len(t, calls, 2)
	for _, c := range calls {
		require.Equal(t, store.CauseTimeout, c.Cause)
		require.Equal(t, "Bearer "+testControlPlaneKey.Credential(s.workerID), c.Auth,
			"every call carries the worker's own credential")
	}
	for _, id := range s.attempts {
		at := h.attempt(s.key, id)
		if id%2 == 0 {
			require.Equal(t, domain.TaskKilled, at.State)
			require.Equal(t, store.CauseTimeout, *at.Cause)
		} else {
			require.Equal(t, domain.TaskRunning, at.State, "the executor reports a kill it made")
		}
	}
}

// Capstan's rule: a dead worker's attempts are already terminated; its executor
// is not called.
func TestDeadWorkerIsNotCalled(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.WorkerGrace = 10 * time.Second
	later := func() time.Time { return time.Now().Add(time.Hour) } // every heartbeat is an hour old
	h := newHarness(t, cfg, func(d *Deps) { d.Now = later })
	exe := newFakeExecutor(t, always(http.StatusOK))
	h.start()
	s := h.seedAbort(exe.URL(), 1)
	require.NoError(t, h.push(s.key))

	a := h.waitOutcome(s.key)
	require.Equal(t, store.AbortDelivered, *a.AbortOutcome)
	require.Empty(t, exe.Calls())
	at := h.attempt(s.key, s.attempts[0])
	require.Equal(t, domain.TaskKilled, at.State)
	require.Equal(t, store.CauseAborted, *at.Cause)
}

// One attempt already gone, another failing once: the gone one is recorded
// KILLED at once and never called again; only the other is retried.
func TestRetriesOnlyLiveAttempts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig(), nil)
	var gone int64
	var mu sync.Mutex
	exe := newFakeExecutor(t, func(id int64, n int) int {
		mu.Lock()
		defer mu.Unlock()
		if id == gone {
			return http.StatusNotFound
		}
		return failThenOK(1)(id, n)
	})
	h.start()
	s := h.seedAbort(exe.URL(), 2)
	mu.Lock()
	gone = s.attempts[0]
	mu.Unlock()
	require.NoError(t, h.push(s.key))

	a := h.waitOutcome(s.key)
	require.Equal(t, store.AbortDelivered, *a.AbortOutcome)
	require.Equal(t, 2, a.AbortAttemptCount)
	require.Equal(t, 1, exe.callsTo(s.attempts[0]))
	require.Equal(t, 2, exe.callsTo(s.attempts[1]))
	require.Equal(t, domain.TaskKilled, h.attempt(s.key, s.attempts[0]).State)
}

// Flyte's dedupe queue, here asynq's TaskID: pushes while the abort is queued,
// running or in backoff are no-ops; the executor never sees two deliveries
// of one abort at once.
func TestConcurrentPushesDeliverOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig(), nil)
	exe := newFakeExecutor(t, failThenOK(2))
	exe.latency = 20 * time.Millisecond
	h.start()
	s := h.seedAbort(exe.URL(), 1)

	const goroutines, perGoroutine = 50, 20
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*perGoroutine)
	for range goroutines {
		wg.Go(func() {
			for range perGoroutine {
				errs <- h.push(s.key)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	a := h.waitOutcome(s.key)
	require.Equal(t, store.AbortDelivered, *a.AbortOutcome)
	h.waitQueueIdle() // late pushes found the abort cleared
	require.Len(t, exe.Calls(), 3)
	require.EqualValues(t, 1, exe.maxInFlight.Load())
	require.Equal(t, 3, h.action(s.key).AbortAttemptCount)
	require.Positive(t, h.enq.Duplicates.Load())
}

// Flyte's full-jitter backoff: the delay after failed round
// n is uniform in [0, min(MaxDelay, InitialDelay·2^(n-1))].
func TestBackoffDelaysWithinCeiling(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxAttempts = 8
	var mu sync.Mutex
	var drawn [][2]int64 // {n, value} of each draw in [0, n)
	h := newHarness(t, cfg, func(d *Deps) {
		d.Rand = func(n int64) int64 {
			v := rand.Int64N(n)
			mu.Lock()
			drawn = append(drawn, [2]int64{n, v})
			mu.Unlock()
			return v
		}
	})
	exe := newFakeExecutor(t, always(http.StatusInternalServerError))
	h.start()
	s := h.seedAbort(exe.URL(), 1)
	require.NoError(t, h.push(s.key))
	h.waitOutcome(s.key)

	calls := exe.Calls()
	require.Len(t, calls, cfg.MaxAttempts)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, drawn, cfg.MaxAttempts-1)
	// Scheduling slack: the round's own Postgres work, asynq's forwarder
	// (DelayedTaskCheckInterval) and idle poll (TaskCheckInterval), under
	// `make test`'s load on a 2-core machine (a 200 ms stall was seen). It
	// still catches a retry left to asynq's whole seconds or 5 s forwarder.
	const tolerance = 400 * time.Millisecond
	gaps := map[time.Duration]bool{}
	for n := 1; n < cfg.MaxAttempts; n++ {
		ceiling := min(cfg.MaxDelay, cfg.InitialDelay<<(n-1))
		require.Equal(t, int64(ceiling)+1, drawn[n-1][0], "round %d: ceiling", n)
		require.LessOrEqual(t, drawn[n-1][1], int64(ceiling), "round %d: delay", n)
		gap := calls[n].At.Sub(calls[n-1].At)
		// Never early, though asynq rounds retry times down to the second.
		require.GreaterOrEqual(t, gap, time.Duration(drawn[n-1][1]), "round %d: gap %s before its delay", n, gap)
		require.LessOrEqual(t, gap, time.Duration(drawn[n-1][1])+tolerance, "round %d: gap %s, delay %s", n, gap,
			time.Duration(drawn[n-1][1]))
		t.Logf("round %d: ceiling %s, drawn %s, observed gap %s", n, ceiling, time.Duration(drawn[n-1][1]), gap)
		gaps[gap] = true
	}
	require.Greater(t, len(gaps), 1, "every gap equal: no jitter")
}

// Flyte's startup scan: an abort in Postgres with nothing in Redis is
// delivered once the service starts.
func TestStartupScanDelivers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig(), nil)
	exe := newFakeExecutor(t, always(http.StatusOK))
	s := h.seedAbort(exe.URL(), 1)
	info, err := h.insp.GetQueueInfo(h.cfg.Queue)
	if err == nil {
		require.Zero(t, info.Size)
	}
	h.start()

	a := h.waitOutcome(s.key)
	require.Equal(t, store.AbortDelivered, *a.AbortOutcome)
	require.Len(t, exe.Calls(), 1)
	require.InDelta(t, 1, testutil.ToFloat64(h.rec.metrics.resyncEnqueued.WithLabelValues(kindAction, resultEnqueued)), 0)
}

// The resync pushes each pending abort once (the TaskID dedupes), and
// replaces a task asynq archived, whose TaskID would otherwise block every
// push.
func TestRunOnceDedupesAndRevives(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig(), nil) // not started: nothing consumes
	s := h.seedAbort("http://127.0.0.1:1", 1)
	ctx := t.Context()

	res, err := h.rec.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, ResyncResult{Pending: 1, Enqueued: 1}, res)
	res, err = h.rec.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, ResyncResult{Pending: 1, Duplicates: 1}, res)

	require.NoError(t, h.insp.ArchiveTask(h.cfg.Queue, s.key.String()))
	res, err = h.rec.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, ResyncResult{Pending: 1, Revived: 1}, res)
	info, err := h.insp.GetTaskInfo(h.cfg.Queue, s.key.String())
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStatePending, info.State)
	require.Equal(t, h.cfg.TaskMaxRetry(), info.MaxRetry)
}

// A payload that can never be handled is not retried.
func TestHandleBadPayloadSkipsRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig(), nil)
	for _, payload := range []string{`{`, `{"key":"a/b"}`, `{"key":"P/d/r/a0"}`} {
		err := h.rec.HandleActionAbort(t.Context(), asynq.NewTask(queue.TypeActionAbort, []byte(payload)))
		require.ErrorIs(t, err, asynq.SkipRetry, payload)
	}
}

// failingMarkStore is the real store with MarkAbortAttempt failing, as when
// Postgres is unreachable.
type failingMarkStore struct{ Store }

func (failingMarkStore) MarkAbortAttempt(context.Context, domain.ActionKey) (int, error) {
	return 0, errors.New("connection refused")
}

// A round that could not be counted is retried after InitialDelay, and is
// no failure in asynq's eyes (it never archives the task).
func TestUncountedRoundRetriesAfterInitialDelay(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	h := newHarness(t, cfg, func(d *Deps) { d.Store = failingMarkStore{d.Store} })
	s := h.seedAbort("http://127.0.0.1:1", 1)
	err := h.rec.HandleActionAbort(t.Context(), queue.NewActionAbortTask(s.key, cfg.TaskMaxRetry()))
	var re *RetryError
	require.ErrorAs(t, err, &re)
	require.Equal(t, cfg.InitialDelay, re.Delay)
	require.Zero(t, re.Attempt)
	require.False(t, isFailure(err))
	require.Equal(t, cfg.InitialDelay, retryDelay(h.rec.backoff)(0, err, nil))
	require.Zero(t, h.action(s.key).AbortAttemptCount)
}

// asynq keeps retry times in whole seconds and so delivers a retry up to 1s
// early: the reconciler requeues it for the rest of its delay, without
// counting a round or calling the executor.
func TestEarlyRetryIsRequeuedUncounted(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	h := newHarness(t, cfg, nil)
	exe := newFakeExecutor(t, always(http.StatusOK))
	s := h.seedAbort(exe.URL(), 1)
	h.rec.due.set(s.key.String(), time.Now().Add(time.Minute))

	err := h.rec.HandleActionAbort(t.Context(), queue.NewActionAbortTask(s.key, cfg.TaskMaxRetry()))
	var re *RetryError
	require.ErrorAs(t, err, &re)
	require.ErrorIs(t, err, errEarly)
	require.InDelta(t, time.Minute, re.Delay, float64(time.Second))
	require.False(t, isFailure(err), "not a failure: asynq does not count it")
	require.Zero(t, h.action(s.key).AbortAttemptCount, "no round counted")
	require.Empty(t, exe.Calls())

	h.rec.due.set(s.key.String(), time.Now())
	require.NoError(t, h.rec.HandleActionAbort(t.Context(), queue.NewActionAbortTask(s.key, cfg.TaskMaxRetry())))
	require.Equal(t, 1, h.action(s.key).AbortAttemptCount)
	require.Len(t, exe.Calls(), 1)
}
