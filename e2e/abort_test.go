package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	dom "github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

// The abort acceptance of issue #4, against real services and real
// executors. Each executor sits behind a FaultProxy that injects failures
// into the abort calls and records them. The proxied executors never
// heartbeat (CAPSTAN_HEARTBEAT_INTERVAL=1h, with a worker grace to match),
// so the heartbeat's stop list, Capstan's second line against zombies,
// cannot kill anything: every process that dies here was killed by the
// abort reconciler, and every call is counted.

// raceExitNow stops the race runtime's 1s sleep at exit (GORACE
// atexit_sleep_ms defaults to 1000). The executor runs each attempt under a
// shim that is the executor's own binary, built with -race here, so without
// it every kill would be answered a second late, as it never is in
// production.
const raceExitNow = "GORACE=atexit_sleep_ms=0"

// quietExecutor is the environment of an executor behind proxy that only
// the reconciler can stop.
func quietExecutor(proxy *FaultProxy) []string {
	return append(proxy.ExecutorEnv(), "CAPSTAN_HEARTBEAT_INTERVAL=1h", "CAPSTAN_EXECUTOR_SLOTS=10")
}

// sleepers is a running step of replicas `sleep 600` tasks: the pids of
// each task's shell and sleep, and its attempt.
type sleepers struct {
	run      string
	pids     []int
	attempts []api.Attempt
}

// startSleepers creates a run of one step "s" of replicas `sleep 600` tasks
// and waits until every one runs and its RUNNING report has landed.
func startSleepers(t *testing.T, s *Stack, replicas int) sleepers {
	t.Helper()
	run := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "s", Replicas: ptr(replicas),
		Command: ptr(hostPidTo(`"$CAPSTAN_RUN_DIR/sh-$CAPSTAN_TASK_INDEX.pid"`) + "; " +
			bgHostPid("sleep 600", `"$CAPSTAN_RUN_DIR/sleep-$CAPSTAN_TASK_INDEX.pid"`) + " wait")}}})
	out := sleepers{run: run}
	for i := range replicas {
		for _, f := range []string{"sh", "sleep"} {
			out.pids = append(out.pids, pidIn(t, s, filepath.Join(runDir(s, run), fmt.Sprintf("%s-%d.pid", f, i))))
		}
	}
	// RUNNING as the control plane sees it, not only started: a RUNNING
	// report that lands after an abort is answered "stop", and the executor
	// then kills the attempt itself, which would race the abort's delivery.
	s.Eventually(10*time.Second, "every task's attempt reported RUNNING", func() bool {
		tasks := action(getRun(t, s, run), "s").Tasks
		out.attempts = out.attempts[:0]
		for _, task := range tasks {
			if n := len(task.Attempts); n > 0 && task.Attempts[n-1].State == api.TaskStateRUNNING {
				out.attempts = append(out.attempts, task.Attempts[n-1])
			}
		}
		return len(out.attempts) == replicas
	})
	return out
}

func abortRun(t *testing.T, s *Stack, run, reason string) {
	t.Helper()
	resp, err := s.Client.AbortRunWithResponse(context.Background(), project, domain, run, api.AbortRequest{Reason: &reason})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON202, "abort: %d %s", resp.StatusCode(), resp.Body)
}

// waitOutcome waits until run's abort is cleared and checks its outcome.
func waitOutcome(t *testing.T, s *Stack, run string, timeout time.Duration, want string) *api.Run {
	t.Helper()
	var r *api.Run
	s.Eventually(timeout, "abort of "+run+" cleared", func() bool {
		r = getRun(t, s, run)
		a := action(r, dom.RootActionName).Abort
		return a != nil && a.Outcome != nil
	})
	abort := action(r, dom.RootActionName).Abort
	require.Equal(t, want, *abort.Outcome)
	require.Nil(t, abort.RequestedAt, "cleared")
	return r
}

// dbAbort reads run's a0 row in Postgres, where the reconciler keeps its count.
func dbAbort(t *testing.T, s *Stack, run string) store.Action {
	t.Helper()
	d, err := s.Store().Actions().GetAction(context.Background(),
		dom.RunKey{Project: project, Domain: domain, Run: run}.Action(dom.RootActionName))
	require.NoError(t, err)
	return d.Action
}

func allGone(pids []int) bool {
	for _, pid := range pids {
		if !ProcessGone(pid) {
			return false
		}
	}
	return true
}

// TestAbortFaults: the delivery rules of Flyte's AbortReconciler, one executor behind a
// fault-injecting proxy, with the default ABORT_MAX_ATTEMPTS (10) and
// millisecond backoffs.
func TestAbortFaults(t *testing.T) {
	t.Parallel()
	proxy := NewFaultProxy(t)
	const maxAttempts, initial, maxDelay = 10, 50 * time.Millisecond, 400 * time.Millisecond
	s := Start(t, bins, Options{Executors: 1, ExecutorEnv: func(int) []string { return quietExecutor(proxy) },
		Env: []string{raceExitNow, "CAPSTAN_WORKER_GRACE=10m", "ABORT_INITIAL_DELAY=" + initial.String(),
			"ABORT_MAX_DELAY=" + maxDelay.String(), "CAPSTAN_DELAYED_TASK_CHECK_INTERVAL=10ms",
			"CAPSTAN_TASK_CHECK_INTERVAL=10ms"}})

	t.Run("N failures then success: N+1 calls, count N+1, cleared", func(t *testing.T) {
		t.Parallel()
		const n = 3
		sl := startSleepers(t, s, 1)
		id := sl.attempts[0].Id
		proxy.Plan(id, FaultPlan{Fail: n})
		abortRun(t, s, sl.run, "n failures")

		waitOutcome(t, s, sl.run, 15*time.Second, store.AbortDelivered)
		calls := proxy.Calls(id)
		require.Len(t, calls, n+1)
		for i, c := range calls {
			require.Equal(t, store.CauseAborted, c.Cause)
			require.Equal(t, "n failures", c.Reason)
			require.Equal(t, i == n, c.Forwarded, "call %d", i+1)
		}
		require.Equal(t, http.StatusOK, calls[n].Status, "the real executor killed it")
		row := dbAbort(t, s, sl.run)
		require.Equal(t, n+1, row.AbortAttemptCount)
		require.Nil(t, row.AbortRequestedAt)
		require.True(t, allGone(sl.pids), "shell and sleep are gone")
	})

	t.Run("always failing: MaxAttempts calls with jittered backoff, then flagged", func(t *testing.T) {
		t.Parallel()
		sl := startSleepers(t, s, 1)
		id := sl.attempts[0].Id
		proxy.Plan(id, FaultPlan{Status: http.StatusInternalServerError})
		abortRun(t, s, sl.run, "hopeless")

		run := waitOutcome(t, s, sl.run, 20*time.Second, store.AbortNeedsIntervention)
		require.Equal(t, maxAttempts, action(run, dom.RootActionName).Abort.AttemptCount, "the run shows it")
		calls := proxy.Calls(id)
		require.Len(t, calls, maxAttempts)
		require.Equal(t, maxAttempts, dbAbort(t, s, sl.run).AbortAttemptCount)
		require.False(t, allGone(sl.pids), "flagged, not pretended: the process still runs")

		list, err := s.Client.ListAbortsWithResponse(context.Background(),
			&api.ListAbortsParams{State: ptr(api.NeedsIntervention)})
		require.NoError(t, err)
		require.NotNil(t, list.JSON200, "%d %s", list.StatusCode(), list.Body)
		var listed bool
		for _, a := range list.JSON200.Aborts {
			listed = listed || a.Run == sl.run && a.Action == dom.RootActionName && a.AttemptCount == maxAttempts
		}
		require.True(t, listed, "GET /v1/aborts?state=needs_intervention lists it: %+v", list.JSON200.Aborts)

		checkBackoff(t, calls, initial, maxDelay)
	})

	t.Run("404: one call, already terminated, cleared", func(t *testing.T) {
		t.Parallel()
		sl := startSleepers(t, s, 1)
		id := sl.attempts[0].Id
		// An executor that no longer holds the attempt (say, it restarted).
		// The process this proxy hides lives until the stack stops.
		proxy.Plan(id, FaultPlan{Status: http.StatusNotFound})
		abortRun(t, s, sl.run, "gone")

		waitOutcome(t, s, sl.run, 15*time.Second, store.AbortDelivered)
		require.Len(t, proxy.Calls(id), 1)
		require.Equal(t, 1, dbAbort(t, s, sl.run).AbortAttemptCount)
		at := action(getRun(t, s, sl.run), "s").Tasks[0].Attempts[0]
		require.Equal(t, api.TaskStateKILLED, at.State, "recorded as already terminated")
		require.Equal(t, store.CauseAborted, *at.Cause)
	})

	t.Run("1000 concurrent pushes: one delivery in flight, calls = failures+1", func(t *testing.T) {
		t.Parallel()
		const failures = 2
		sl := startSleepers(t, s, 1)
		id := sl.attempts[0].Id
		proxy.Plan(id, FaultPlan{Fail: failures, Latency: 100 * time.Millisecond})
		abortRun(t, s, sl.run, "pushed a lot")

		client := asynq.NewClient(s.RedisOpt())
		t.Cleanup(func() { client.Close() })
		enq := queue.NewEnqueuer(client, slog.New(slog.DiscardHandler))
		key := dom.RunKey{Project: project, Domain: domain, Run: sl.run}.Action(dom.RootActionName)
		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		for range 50 {
			wg.Go(func() {
				for range 20 {
					errs <- enq.Enqueue(context.Background(), queue.NewActionAbortTask(key, maxAttempts+5))
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "a duplicate push is not an error")
		}

		waitOutcome(t, s, sl.run, 15*time.Second, store.AbortDelivered)
		require.Len(t, proxy.Calls(id), failures+1, "the executor is called only as often as it fails")
		require.Equal(t, 1, proxy.MaxInFlight(id), "never two deliveries of one abort at once")
		require.Equal(t, failures+1, dbAbort(t, s, sl.run).AbortAttemptCount)
		require.Positive(t, enq.Duplicates.Load())
		t.Logf("1000 pushes: %d deduplicated by the TaskID", enq.Duplicates.Load())
		s.Eventually(5*time.Second, "processes gone", func() bool { return allGone(sl.pids) })
	})
}

// checkBackoff checks the gaps between consecutive failed calls against
// Flyte's full-jitter backoff: the gap after failed round n is its delay, drawn
// from [0, min(maxDelay, initial·2^(n-1))], plus the round's own work.
func checkBackoff(t *testing.T, calls []ProxyCall, initial, maxDelay time.Duration) {
	t.Helper()
	// A round's own work: Postgres writes, the HTTP call, asynq's forwarder
	// and poll (10ms each here), on a loaded 2-core machine under -race. A
	// delay twice the ceiling (800ms at the cap) still fails.
	const slack = 300 * time.Millisecond
	distinct := map[time.Duration]bool{}
	var short int
	for n := 1; n < len(calls); n++ {
		ceiling := min(maxDelay, initial<<(n-1))
		gap := calls[n].At.Sub(calls[n-1].At)
		t.Logf("round %d: ceiling %s, gap %s", n, ceiling, gap.Round(time.Millisecond))
		require.LessOrEqual(t, gap, ceiling+slack, "round %d: gap %s beyond ceiling %s", n, gap, ceiling)
		distinct[gap.Round(time.Millisecond)] = true
		if ceiling == maxDelay && gap < ceiling*3/4 {
			short++
		}
	}
	require.Greater(t, len(distinct), 1, "every gap equal: no jitter")
	// Without jitter every capped gap would be at least maxDelay; with full
	// jitter each is below 3/4 of it with probability about 2/3.
	require.Positive(t, short, "no capped gap below 3/4 of MaxDelay: no jitter")
}

// TestAbortSurvives: the promise through a 20-task abort, a crash of the
// reconciler, and a wiped Redis. Two executors, each behind a proxy; delays
// in seconds so that a backoff can be caught.
func TestAbortSurvives(t *testing.T) {
	t.Parallel()
	proxies := []*FaultProxy{NewFaultProxy(t), NewFaultProxy(t)}
	s := Start(t, bins, Options{Executors: 2, ExecutorEnv: func(i int) []string { return quietExecutor(proxies[i-1]) },
		Env: []string{raceExitNow, "CAPSTAN_WORKER_GRACE=10m", "ABORT_INITIAL_DELAY=1s", "ABORT_MAX_DELAY=2s",
			"ABORT_RESYNC_PERIOD=1s"}})
	plan := func(id int64, p FaultPlan) {
		for _, px := range proxies {
			px.Plan(id, p)
		}
	}
	calls := func(id int64) []ProxyCall { return append(proxies[0].Calls(id), proxies[1].Calls(id)...) }

	t.Run("20 running tasks on two executors are gone within 5s", func(t *testing.T) {
		sl := startSleepers(t, s, 20)
		workers := map[string]int{}
		for _, a := range sl.attempts {
			workers[*a.WorkerId]++
		}
		require.Len(t, workers, 2, "spread over both executors: %v", workers)

		abortRun(t, s, sl.run, "twenty")
		start := time.Now()
		s.Eventually(5*time.Second, "all 40 processes gone", func() bool { return allGone(sl.pids) })
		t.Logf("abort of 20 running tasks: every process gone %s after the 202", time.Since(start).Round(time.Millisecond))
		run := waitOutcome(t, s, sl.run, 5*time.Second, store.AbortDelivered)
		for _, a := range run.Actions {
			require.Equal(t, api.PhaseABORTED, a.Phase, a.Name)
		}
		require.Equal(t, api.PhaseABORTED, run.Phase)
		for _, task := range action(run, "s").Tasks {
			require.Equal(t, api.TaskStateKILLED, task.State)
		}
		all := append(proxies[0].AllCalls(), proxies[1].AllCalls()...)
		require.Len(t, all, 20, "one call per attempt: %+v", all)
		var last time.Duration
		for _, c := range all {
			require.Equal(t, http.StatusOK, c.Status)
			last = max(last, c.At.Add(c.Took).Sub(start))
		}
		t.Logf("the last of the 20 kills answered %s after the 202", last.Round(time.Millisecond))
		require.Equal(t, 1, dbAbort(t, s, sl.run).AbortAttemptCount)
	})

	t.Run("kill -9 in backoff: delivered after restart, count continues", func(t *testing.T) {
		sl := startSleepers(t, s, 1)
		id := sl.attempts[0].Id
		plan(id, FaultPlan{Fail: 1 << 20})
		abortRun(t, s, sl.run, "crash")
		key := dom.RunKey{Project: project, Domain: domain, Run: sl.run}.Action(dom.RootActionName).String()
		insp := asynq.NewInspector(s.RedisOpt())
		t.Cleanup(func() { insp.Close() })

		// Kill only while the task waits in asynq's retry set with at least
		// 300ms to go: never mid-round (a crash there waits for asynq's
		// lease recovery) nor in the last second, where it is requeued.
		s.Eventually(20*time.Second, "the abort waiting in backoff", func() bool {
			info, err := insp.GetTaskInfo(queue.Abort, key)
			return err == nil && info.State == asynq.TaskStateRetry && time.Until(info.NextProcessAt) > 300*time.Millisecond
		})
		s.Kill("abort-reconciler")
		failed := len(calls(id))
		require.Positive(t, failed)
		require.Equal(t, failed, dbAbort(t, s, sl.run).AbortAttemptCount, "every round was counted before its call")
		info, err := insp.GetTaskInfo(queue.Abort, key)
		require.NoError(t, err)
		require.Equal(t, asynq.TaskStateRetry, info.State, "killed in backoff")

		plan(id, FaultPlan{})
		s.StartService("abort-reconciler")
		waitOutcome(t, s, sl.run, 15*time.Second, store.AbortDelivered)
		require.Equal(t, failed+1, dbAbort(t, s, sl.run).AbortAttemptCount, "the count continues")
		require.Len(t, calls(id), failed+1)
		s.Eventually(5*time.Second, "processes gone", func() bool { return allGone(sl.pids) })
	})

	t.Run("Redis wiped with aborts pending: delivered after a resync", func(t *testing.T) {
		const n = 3
		var runs []sleepers
		for range n {
			sl := startSleepers(t, s, 1)
			plan(sl.attempts[0].Id, FaultPlan{Fail: 1 << 20})
			runs = append(runs, sl)
		}
		for _, sl := range runs {
			abortRun(t, s, sl.run, "wiped")
		}
		s.Eventually(10*time.Second, "every abort failed once", func() bool {
			for _, sl := range runs {
				if len(calls(sl.attempts[0].Id)) == 0 {
					return false
				}
			}
			return true
		})
		s.FlushRedis()
		insp := asynq.NewInspector(s.RedisOpt())
		t.Cleanup(func() { insp.Close() })
		for _, sl := range runs {
			key := dom.RunKey{Project: project, Domain: domain, Run: sl.run}.Action(dom.RootActionName).String()
			_, err := insp.GetTaskInfo(queue.Abort, key)
			require.Error(t, err, "Redis no longer knows the abort")
		}
		for _, sl := range runs {
			require.NotNil(t, dbAbort(t, s, sl.run).AbortRequestedAt, "pending in Postgres")
			plan(sl.attempts[0].Id, FaultPlan{})
		}
		for _, sl := range runs {
			waitOutcome(t, s, sl.run, 15*time.Second, store.AbortDelivered)
			last := calls(sl.attempts[0].Id)
			require.True(t, last[len(last)-1].Forwarded, "delivered to the executor")
			s.Eventually(5*time.Second, "processes gone", func() bool { return allGone(sl.pids) })
		}
	})
}
