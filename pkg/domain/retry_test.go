package domain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// defaultBudget is a fresh task's budget with Iris's and Flyte's defaults.
func defaultBudget() domain.Budget {
	return domain.Budget{
		MaxRetriesFailure:    domain.DefaultMaxRetriesFailure,
		MaxRetriesPreemption: domain.DefaultMaxRetriesPreemption,
		MaxSystemFailures:    domain.DefaultMaxSystemFailures,
	}
}

func TestRetryDefaults(t *testing.T) {
	t.Parallel()
	// Iris's retry semantics: failure budget default "0 (no retries)".
	require.Equal(t, 0, domain.DefaultMaxRetriesFailure, "max_retries_failure default 0 (no retries)")
	// Iris: "max_retries_preemption (default: 100)".
	require.Equal(t, 100, domain.DefaultMaxRetriesPreemption, "max_retries_preemption default 100")
	// Flyte's executor: "MaxSystemFailures (default 3, configured via DefaultMaxSystemFailures)".
	require.Equal(t, 3, domain.DefaultMaxSystemFailures, "MaxSystemFailures default 3")
}

func TestRetryResultString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "SHOULD_RETRY", domain.ShouldRetry.String())
	require.Equal(t, "EXCEEDED_RETRY_LIMIT", domain.ExceededRetryLimit.String())
	require.Equal(t, "NO_RETRY", domain.NoRetry.String())
}

func TestHandleAttemptResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string // the Iris or Flyte rule, quoted
		in      domain.Budget
		outcome domain.AttemptOutcome
		want    domain.Budget
		result  domain.RetryResult
	}{
		{
			name:    "FAILED: failure_count <= max_retries_failure -> SHOULD_RETRY (first failure of 2 allowed)",
			in:      domain.Budget{MaxRetriesFailure: 2, MaxRetriesPreemption: 100, MaxSystemFailures: 3},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed},
			want:    domain.Budget{FailureCount: 1, MaxRetriesFailure: 2, MaxRetriesPreemption: 100, MaxSystemFailures: 3},
			result:  domain.ShouldRetry,
		},
		{
			name:    "FAILED: failure_count <= max_retries_failure -> SHOULD_RETRY (boundary: count == limit)",
			in:      domain.Budget{FailureCount: 1, MaxRetriesFailure: 2},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed},
			want:    domain.Budget{FailureCount: 2, MaxRetriesFailure: 2},
			result:  domain.ShouldRetry,
		},
		{
			name:    "FAILED: failure_count > max_retries_failure -> EXCEEDED_RETRY_LIMIT",
			in:      domain.Budget{FailureCount: 2, MaxRetriesFailure: 2},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed},
			want:    domain.Budget{FailureCount: 3, MaxRetriesFailure: 2},
			result:  domain.ExceededRetryLimit,
		},
		{
			name:    "FAILED: max_retries_failure default 0 (no retries) -> first failure EXCEEDED_RETRY_LIMIT",
			in:      defaultBudget(),
			outcome: domain.AttemptOutcome{State: domain.TaskFailed},
			want:    domain.Budget{FailureCount: 1, MaxRetriesPreemption: 100, MaxSystemFailures: 3},
			result:  domain.ExceededRetryLimit,
		},
		{
			name:    "FAILED charges failure_count only: preemption_count untouched",
			in:      domain.Budget{PreemptionCount: 7, MaxRetriesFailure: 1, MaxRetriesPreemption: 100},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed},
			want:    domain.Budget{FailureCount: 1, PreemptionCount: 7, MaxRetriesFailure: 1, MaxRetriesPreemption: 100},
			result:  domain.ShouldRetry,
		},
		{
			name:    "WORKER_FAILED: increments preemption_count; budget remains -> SHOULD_RETRY",
			in:      defaultBudget(),
			outcome: domain.AttemptOutcome{State: domain.TaskWorkerFailed},
			want:    domain.Budget{PreemptionCount: 1, MaxRetriesPreemption: 100, MaxSystemFailures: 3},
			result:  domain.ShouldRetry,
		},
		{
			name:    "WORKER_FAILED: preemption_count == max_retries_preemption (100) -> SHOULD_RETRY",
			in:      domain.Budget{PreemptionCount: 99, MaxRetriesPreemption: 100},
			outcome: domain.AttemptOutcome{State: domain.TaskWorkerFailed},
			want:    domain.Budget{PreemptionCount: 100, MaxRetriesPreemption: 100},
			result:  domain.ShouldRetry,
		},
		{
			name:    "WORKER_FAILED: If exhausted: EXCEEDED_RETRY_LIMIT -- task stays in WORKER_FAILED and is terminal",
			in:      domain.Budget{PreemptionCount: 100, MaxRetriesPreemption: 100},
			outcome: domain.AttemptOutcome{State: domain.TaskWorkerFailed},
			want:    domain.Budget{PreemptionCount: 101, MaxRetriesPreemption: 100},
			result:  domain.ExceededRetryLimit,
		},
		{
			name:    "WORKER_FAILED: worker failures do not charge failure_count",
			in:      domain.Budget{MaxRetriesFailure: 0, MaxRetriesPreemption: 1},
			outcome: domain.AttemptOutcome{State: domain.TaskWorkerFailed},
			want:    domain.Budget{PreemptionCount: 1, MaxRetriesPreemption: 1},
			result:  domain.ShouldRetry,
		},
		{
			name:    "PREEMPTED: ASSIGNED tasks: always retry to PENDING regardless of budget (preemption is free)",
			in:      domain.Budget{PreemptionCount: 3, MaxRetriesPreemption: 3},
			outcome: domain.AttemptOutcome{State: domain.TaskPreempted, WasAssigned: true},
			want:    domain.Budget{PreemptionCount: 3, MaxRetriesPreemption: 3},
			result:  domain.ShouldRetry,
		},
		{
			name:    "PREEMPTED: ASSIGNED tasks: free even with max_retries_preemption 0",
			in:      domain.Budget{},
			outcome: domain.AttemptOutcome{State: domain.TaskPreempted, WasAssigned: true},
			want:    domain.Budget{},
			result:  domain.ShouldRetry,
		},
		{
			name:    "PREEMPTED: BUILDING or RUNNING tasks: preemption_count <= max_retries_preemption -> requeued to PENDING",
			in:      domain.Budget{PreemptionCount: 2, MaxRetriesPreemption: 3},
			outcome: domain.AttemptOutcome{State: domain.TaskPreempted},
			want:    domain.Budget{PreemptionCount: 3, MaxRetriesPreemption: 3},
			result:  domain.ShouldRetry,
		},
		{
			name:    "PREEMPTED: BUILDING or RUNNING tasks: preemption_count > max_retries_preemption -> PREEMPTED (terminal)",
			in:      domain.Budget{PreemptionCount: 3, MaxRetriesPreemption: 3},
			outcome: domain.AttemptOutcome{State: domain.TaskPreempted},
			want:    domain.Budget{PreemptionCount: 4, MaxRetriesPreemption: 3},
			result:  domain.ExceededRetryLimit,
		},
		{
			name:    "KILLED is always terminal and never retried",
			in:      domain.Budget{MaxRetriesFailure: 5, MaxRetriesPreemption: 5, MaxSystemFailures: 5},
			outcome: domain.AttemptOutcome{State: domain.TaskKilled},
			want:    domain.Budget{MaxRetriesFailure: 5, MaxRetriesPreemption: 5, MaxSystemFailures: 5},
			result:  domain.NoRetry,
		},
		{
			name:    "UNSCHEDULABLE is always terminal (never retried)",
			in:      domain.Budget{MaxRetriesFailure: 5, MaxRetriesPreemption: 5, MaxSystemFailures: 5},
			outcome: domain.AttemptOutcome{State: domain.TaskUnschedulable},
			want:    domain.Budget{MaxRetriesFailure: 5, MaxRetriesPreemption: 5, MaxSystemFailures: 5},
			result:  domain.NoRetry,
		},
		{
			name:    "SUCCEEDED: No retry logic applies",
			in:      domain.Budget{FailureCount: 1, MaxRetriesFailure: 5, MaxRetriesPreemption: 5},
			outcome: domain.AttemptOutcome{State: domain.TaskSucceeded},
			want:    domain.Budget{FailureCount: 1, MaxRetriesFailure: 5, MaxRetriesPreemption: 5},
			result:  domain.NoRetry,
		},
		{
			name:    "KILLED by a system-flagged outcome is still never retried",
			in:      domain.Budget{MaxSystemFailures: 3},
			outcome: domain.AttemptOutcome{State: domain.TaskKilled, System: true},
			want:    domain.Budget{MaxSystemFailures: 3},
			result:  domain.NoRetry,
		},
		{
			name:    "system failure: retried in place up to max_system_failures without charging the user's budget",
			in:      defaultBudget(),
			outcome: domain.AttemptOutcome{State: domain.TaskFailed, System: true},
			want:    domain.Budget{SystemFailureCount: 1, MaxRetriesPreemption: 100, MaxSystemFailures: 3},
			result:  domain.ShouldRetry,
		},
		{
			name:    "system failure: count == MaxSystemFailures (3) -> still retried",
			in:      domain.Budget{SystemFailureCount: 2, MaxSystemFailures: 3},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed, System: true},
			want:    domain.Budget{SystemFailureCount: 3, MaxSystemFailures: 3},
			result:  domain.ShouldRetry,
		},
		{
			name:    "system failure: If the threshold is exceeded, the task is moved to PermanentFailure",
			in:      domain.Budget{SystemFailureCount: 3, MaxSystemFailures: 3},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed, System: true},
			want:    domain.Budget{SystemFailureCount: 4, MaxSystemFailures: 3},
			result:  domain.ExceededRetryLimit,
		},
		{
			name:    "system failure charges only the system budget: failure_count and preemption_count untouched",
			in:      domain.Budget{FailureCount: 1, MaxRetriesFailure: 1, PreemptionCount: 4, MaxRetriesPreemption: 9, MaxSystemFailures: 3},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed, System: true},
			want:    domain.Budget{FailureCount: 1, MaxRetriesFailure: 1, PreemptionCount: 4, MaxRetriesPreemption: 9, SystemFailureCount: 1, MaxSystemFailures: 3},
			result:  domain.ShouldRetry,
		},
		{
			name:    "system failure that reached RUNNING: still charged, never reset (the livelock guard)",
			in:      domain.Budget{SystemFailureCount: 3, MaxSystemFailures: 3},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed, System: true, Started: true},
			want:    domain.Budget{SystemFailureCount: 4, MaxSystemFailures: 3},
			result:  domain.ExceededRetryLimit,
		},
		{
			name:    "user failure after RUNNING: the attempt progressed, system_failure_count resets, failure_count charged",
			in:      domain.Budget{SystemFailureCount: 2, MaxSystemFailures: 3, MaxRetriesFailure: 1},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed, Started: true},
			want:    domain.Budget{FailureCount: 1, MaxRetriesFailure: 1, MaxSystemFailures: 3},
			result:  domain.ShouldRetry,
		},
		{
			name:    "user failure that never reached RUNNING: no reset",
			in:      domain.Budget{SystemFailureCount: 2, MaxSystemFailures: 3, MaxRetriesFailure: 1},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed},
			want:    domain.Budget{FailureCount: 1, SystemFailureCount: 2, MaxRetriesFailure: 1, MaxSystemFailures: 3},
			result:  domain.ShouldRetry,
		},
		{
			name:    "preempted after RUNNING: progressed, system_failure_count resets",
			in:      domain.Budget{SystemFailureCount: 2, MaxSystemFailures: 3, MaxRetriesPreemption: 5},
			outcome: domain.AttemptOutcome{State: domain.TaskPreempted, Started: true},
			want:    domain.Budget{PreemptionCount: 1, MaxRetriesPreemption: 5, MaxSystemFailures: 3},
			result:  domain.ShouldRetry,
		},
		{
			name:    "permanent failure: fails at once, no retry, regardless of budgets",
			in:      domain.Budget{MaxRetriesFailure: 5, MaxRetriesPreemption: 5, MaxSystemFailures: 5},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed, Permanent: true},
			want:    domain.Budget{MaxRetriesFailure: 5, MaxRetriesPreemption: 5, MaxSystemFailures: 5},
			result:  domain.ExceededRetryLimit,
		},
		{
			name:    "permanent failure reported with cause system too: still permanent, nothing charged",
			in:      domain.Budget{MaxSystemFailures: 3},
			outcome: domain.AttemptOutcome{State: domain.TaskFailed, System: true, Permanent: true},
			want:    domain.Budget{MaxSystemFailures: 3},
			result:  domain.ExceededRetryLimit,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, res := domain.HandleAttemptResult(tc.in, tc.outcome)
			require.Equal(t, tc.result, res)
			require.Equal(t, tc.want, got)
		})
	}
}

// "If failure_count <= max_retries_failure ... SHOULD_RETRY ... If
// failure_count > max_retries_failure: EXCEEDED_RETRY_LIMIT": with
// max_retries_failure=2 a task runs 3 times.
func TestFailureBudgetSequence(t *testing.T) {
	t.Parallel()
	b := domain.Budget{MaxRetriesFailure: 2, MaxRetriesPreemption: 100, MaxSystemFailures: 3}
	var results []domain.RetryResult
	for range 3 {
		var r domain.RetryResult
		b, r = domain.HandleAttemptResult(b, domain.AttemptOutcome{State: domain.TaskFailed})
		results = append(results, r)
	}
	require.Equal(t, []domain.RetryResult{domain.ShouldRetry, domain.ShouldRetry, domain.ExceededRetryLimit}, results)
	require.Greater(t, b.FailureCount, b.MaxRetriesFailure, "finished: failure_count > max_retries_failure")
}

// "a job can survive unlimited preemptions as long as the per-task
// preemption budget is not exhausted": interleaved preemptions and system
// failures never spend the user's failure budget.
func TestInterleavedBudgetsAreIndependent(t *testing.T) {
	t.Parallel()
	b := defaultBudget()
	for range 50 {
		var r domain.RetryResult
		b, r = domain.HandleAttemptResult(b, domain.AttemptOutcome{State: domain.TaskPreempted})
		require.Equal(t, domain.ShouldRetry, r)
		b, r = domain.HandleAttemptResult(b, domain.AttemptOutcome{State: domain.TaskWorkerFailed})
		require.Equal(t, domain.ShouldRetry, r)
		b, r = domain.HandleAttemptResult(b, domain.AttemptOutcome{State: domain.TaskPreempted, WasAssigned: true})
		require.Equal(t, domain.ShouldRetry, r)
	}
	require.Equal(t, 100, b.PreemptionCount)
	require.Equal(t, 0, b.FailureCount)
	require.Equal(t, 0, b.SystemFailureCount)
	b, r := domain.HandleAttemptResult(b, domain.AttemptOutcome{State: domain.TaskPreempted})
	require.Equal(t, domain.ExceededRetryLimit, r, "101st charged preemption exceeds max_retries_preemption=100")
	require.Greater(t, b.PreemptionCount, b.MaxRetriesPreemption)
}

// FuzzHandleAttemptResult checks the retry invariants on consistent budgets
// (every counter within its limit, i.e. a task that may still be attempted):
// counters never decrease and at most one rises by exactly 1; limits never
// change; after EXCEEDED_RETRY_LIMIT a counter is past its limit (Iris's
// is_finished); after SHOULD_RETRY every counter is within its limit (the
// task can be scheduled again); NO_RETRY only for states that are never
// retried.
func FuzzHandleAttemptResult(f *testing.F) {
	f.Add(int8(domain.TaskFailed), false, false, uint16(0), uint16(0), uint16(0), uint16(100), uint16(0), uint16(3), false, false)
	f.Add(int8(domain.TaskFailed), false, false, uint16(2), uint16(2), uint16(0), uint16(100), uint16(0), uint16(3), false, false)
	f.Add(int8(domain.TaskFailed), true, false, uint16(0), uint16(0), uint16(0), uint16(100), uint16(3), uint16(3), false, false)
	f.Add(int8(domain.TaskFailed), true, false, uint16(0), uint16(0), uint16(0), uint16(100), uint16(1), uint16(3), false, false)
	f.Add(int8(domain.TaskWorkerFailed), false, false, uint16(0), uint16(0), uint16(100), uint16(100), uint16(0), uint16(3), false, false)
	f.Add(int8(domain.TaskWorkerFailed), false, true, uint16(0), uint16(0), uint16(5), uint16(100), uint16(0), uint16(3), false, false)
	f.Add(int8(domain.TaskPreempted), false, true, uint16(0), uint16(0), uint16(100), uint16(100), uint16(0), uint16(3), false, false)
	f.Add(int8(domain.TaskPreempted), false, false, uint16(0), uint16(0), uint16(100), uint16(100), uint16(0), uint16(3), false, false)
	f.Add(int8(domain.TaskKilled), true, true, uint16(1), uint16(4), uint16(1), uint16(4), uint16(1), uint16(4), false, false)
	f.Add(int8(domain.TaskUnschedulable), false, false, uint16(0), uint16(0), uint16(0), uint16(0), uint16(0), uint16(0), false, false)
	f.Add(int8(domain.TaskSucceeded), false, false, uint16(0), uint16(0), uint16(0), uint16(0), uint16(0), uint16(0), false, false)
	f.Add(int8(domain.TaskRunning), false, false, uint16(0), uint16(0), uint16(0), uint16(0), uint16(0), uint16(0), false, false)
	f.Add(int8(-3), true, false, uint16(9), uint16(9), uint16(9), uint16(9), uint16(9), uint16(9), false, false)
	f.Add(int8(domain.TaskFailed), false, false, uint16(0), uint16(0), uint16(0), uint16(100), uint16(2), uint16(3), true, false)
	f.Add(int8(domain.TaskFailed), true, false, uint16(0), uint16(0), uint16(0), uint16(100), uint16(2), uint16(3), true, false)
	f.Add(int8(domain.TaskFailed), true, false, uint16(0), uint16(0), uint16(0), uint16(100), uint16(2), uint16(3), false, true)
	f.Add(int8(domain.TaskSucceeded), false, false, uint16(0), uint16(0), uint16(0), uint16(100), uint16(2), uint16(3), true, false)

	f.Fuzz(func(t *testing.T, state int8, system, wasAssigned bool, fc, mf, pc, mp, sc, ms uint16, started, permanent bool) {
		// Limits in [0, 1000]; counters within their limits (the task has
		// not been finished by any budget yet).
		lim := func(x uint16) int { return int(x) % 1001 }
		cnt := func(x uint16, limit int) int { return int(x) % (limit + 1) }
		in := domain.Budget{MaxRetriesFailure: lim(mf), MaxRetriesPreemption: lim(mp), MaxSystemFailures: lim(ms)}
		in.FailureCount = cnt(fc, in.MaxRetriesFailure)
		in.PreemptionCount = cnt(pc, in.MaxRetriesPreemption)
		in.SystemFailureCount = cnt(sc, in.MaxSystemFailures)
		s := domain.TaskState(state)
		o := domain.AttemptOutcome{State: s, System: system, WasAssigned: wasAssigned, Started: started, Permanent: permanent}

		out, res := domain.HandleAttemptResult(in, o)
		// An attempt that progressed resets system_failure_count first;
		// only that counter ever decreases, and only then.
		base := in
		if o.Progressed() {
			base.SystemFailureCount = 0
			require.Zero(t, out.SystemFailureCount, "an attempt that progressed resets system_failure_count")
		}
		if s == domain.TaskFailed && permanent {
			require.Equal(t, domain.ExceededRetryLimit, res, "a permanent failure fails at once")
			require.Equal(t, base, out, "a permanent failure charges nothing")
			return
		}
		in = base

		// Limits are configuration: never changed.
		require.Equal(t, in.MaxRetriesFailure, out.MaxRetriesFailure)
		require.Equal(t, in.MaxRetriesPreemption, out.MaxRetriesPreemption)
		require.Equal(t, in.MaxSystemFailures, out.MaxSystemFailures)
		// Counters never decrease; in total they rise by at most 1.
		dF := out.FailureCount - in.FailureCount
		dP := out.PreemptionCount - in.PreemptionCount
		dS := out.SystemFailureCount - in.SystemFailureCount
		require.GreaterOrEqual(t, dF, 0, "failure_count decreased")
		require.GreaterOrEqual(t, dP, 0, "preemption_count decreased")
		require.GreaterOrEqual(t, dS, 0, "system_failure_count decreased")
		require.LessOrEqual(t, dF+dP+dS, 1, "one attempt charges at most one counter by one")

		switch res {
		case domain.ExceededRetryLimit:
			require.True(t, overLimit(out), "after EXCEEDED_RETRY_LIMIT a counter is past its limit (%v %+v -> %+v)", s, in, out)
			require.Equal(t, 1, dF+dP+dS, "exceeding a limit means a counter was charged")
		case domain.ShouldRetry:
			require.False(t, overLimit(out), "after SHOULD_RETRY every counter is within its limit (%v %+v -> %+v)", s, in, out)
		case domain.NoRetry:
			require.NotContains(t, []domain.TaskState{domain.TaskFailed, domain.TaskWorkerFailed, domain.TaskPreempted}, s,
				"retriable states always consult a budget")
			require.Equal(t, in, out, "a state that is never retried charges nothing")
		default:
			t.Fatalf("unknown RetryResult %d", res)
		}

		// Which budget is charged.
		switch {
		case s == domain.TaskFailed && system:
			require.Equal(t, 1, dS, "system failure charges only system_failure_count")
		case s == domain.TaskFailed:
			require.Equal(t, 1, dF, "FAILED charges failure_count")
		case s == domain.TaskWorkerFailed:
			require.Equal(t, 1, dP, "WORKER_FAILED charges preemption_count")
		case s == domain.TaskPreempted && wasAssigned:
			require.Equal(t, 0, dF+dP+dS, "preempting an ASSIGNED task is free")
			require.Equal(t, domain.ShouldRetry, res, "ASSIGNED tasks: always retry to PENDING regardless of budget")
		case s == domain.TaskPreempted:
			require.Equal(t, 1, dP, "PREEMPTED from BUILDING/RUNNING charges preemption_count")
		default:
			require.Equal(t, domain.NoRetry, res)
		}
	})
}

// overLimit reports whether a counter of b is past its limit: what Iris's
// is_finished() reads of a FAILED, WORKER_FAILED or PREEMPTED task.
func overLimit(b domain.Budget) bool {
	return b.FailureCount > b.MaxRetriesFailure || b.PreemptionCount > b.MaxRetriesPreemption ||
		b.SystemFailureCount > b.MaxSystemFailures
}
