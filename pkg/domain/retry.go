package domain

// Default retry limits.
const (
	// DefaultMaxRetriesFailure is Iris's default failure budget: no retries.
	DefaultMaxRetriesFailure = 0
	// DefaultMaxRetriesPreemption is Iris's default preemption budget.
	DefaultMaxRetriesPreemption = 100
	// DefaultMaxSystemFailures is Flyte's DefaultMaxSystemFailures: platform
	// errors retried in place without charging the user's budget.
	DefaultMaxSystemFailures = 3
)

// Budget is a task's retry counters and their limits (Iris's two budgets plus
// Flyte's system-failure budget).
type Budget struct {
	FailureCount         int
	MaxRetriesFailure    int
	PreemptionCount      int
	MaxRetriesPreemption int
	SystemFailureCount   int
	MaxSystemFailures    int
}

// RetryResult is the outcome of HandleAttemptResult.
type RetryResult int

// Retry results (Iris's TaskTransitionResult, plus NoRetry for states that
// are never retried).
const (
	// NoRetry: the attempt's state ends the task (SUCCEEDED, KILLED,
	// UNSCHEDULABLE) without consulting a budget.
	NoRetry RetryResult = iota
	// ShouldRetry: requeue the task to PENDING for a new attempt.
	ShouldRetry
	// ExceededRetryLimit: the task stays in its failure state, terminal.
	ExceededRetryLimit
	// ShouldWait: the work's target is not ready (cause waiting): requeue
	// the task to PENDING after KubeVela's waiting backoff, charging
	// nothing (DecideWait).
	ShouldWait
)

// String names the result as Iris does.
func (r RetryResult) String() string {
	switch r {
	case ShouldRetry:
		return "SHOULD_RETRY"
	case ExceededRetryLimit:
		return "EXCEEDED_RETRY_LIMIT"
	case ShouldWait:
		return "SHOULD_WAIT"
	}
	return "NO_RETRY"
}

// AttemptOutcome is what ended one attempt.
type AttemptOutcome struct {
	// State is the attempt's terminal state.
	State TaskState
	// System is true for a platform failure (the plugin could not start the
	// process, the workdir could not be written): Flyte's system failure.
	System bool
	// WasAssigned is true when the attempt was still ASSIGNED (never started)
	// when it was preempted: such a preemption is free.
	WasAssigned bool
	// Started is true when the attempt reached RUNNING (its executor
	// reported it running: started_at is set).
	Started bool
	// Permanent is true for a FAILED attempt whose spec can never run (cause
	// permanent: an unknown plugin, invalid fields, an http 4xx).
	Permanent bool
	// Waiting is true for a FAILED attempt whose work answered that its
	// target is not ready (cause waiting).
	Waiting bool
}

// Progressed reports whether the attempt really progressed: it reached
// RUNNING and did not end as a system failure. Only such an attempt resets
// the task's system_failure_count. An attempt that merely started does
// not: the reset would then follow every system failure that reports
// RUNNING first, and the task would loop forever (Flyte's executor
// (TaskActionReconciler): the known livelock of resetting SystemFailures).
func (o AttemptOutcome) Progressed() bool {
	return o.Started && !(o.State == TaskFailed && o.System)
}

// CodeMaxSystemFailuresExceeded is the error code of a task that failed for
// good because its system failures exceeded max_system_failures (Flyte's
// PermanentFailure code MaxSystemFailuresExceeded).
const CodeMaxSystemFailuresExceeded = "MaxSystemFailuresExceeded"

// FailureCode returns the error code the decision r on outcome o gives the
// attempt: CodeMaxSystemFailuresExceeded when a system failure exceeded its
// budget, CodeWaitTimeout when a wait outlasted its step's wait_timeout
// (DecideWait), else "" (the executor's own code, if any, stands).
func FailureCode(o AttemptOutcome, r RetryResult) string {
	switch {
	case r != ExceededRetryLimit || o.State != TaskFailed:
		return ""
	case o.Waiting:
		return CodeWaitTimeout
	case o.System && !o.Permanent:
		return CodeMaxSystemFailuresExceeded
	}
	return ""
}

// HandleAttemptResult applies Iris's handle_attempt_result to a task's
// budget: FAILED charges failure_count against max_retries_failure;
// WORKER_FAILED and PREEMPTED charge preemption_count against
// max_retries_preemption, except that preempting an ASSIGNED task is free;
// counter <= limit retries, counter > limit is terminal. A system failure
// (Flyte executor) charges system_failure_count against max_system_failures
// instead of the user's budget; an attempt that progressed (Progressed)
// first resets system_failure_count to 0. A permanent failure (the spec can
// never run) is terminal at once and charges nothing, and a waiting one
// (its target not ready) is ShouldWait and charges nothing either: KubeVela
// marks an unhealthy step "as wait but not failed" (DecideWait times it).
// KILLED, UNSCHEDULABLE and SUCCEEDED are never retried. Other counters
// never decrease. Source: the retry semantics of Iris's task-states
// reference; system failures from Flyte's executor (TaskActionReconciler);
// waits from KubeVela's workflow.
func HandleAttemptResult(b Budget, o AttemptOutcome) (Budget, RetryResult) {
	if o.Progressed() {
		b.SystemFailureCount = 0
	}
	switch o.State {
	case TaskFailed:
		if o.Waiting {
			return b, ShouldWait
		}
		if o.Permanent {
			return b, ExceededRetryLimit
		}
		if o.System {
			b.SystemFailureCount++
			return b, within(b.SystemFailureCount, b.MaxSystemFailures)
		}
		b.FailureCount++
		return b, within(b.FailureCount, b.MaxRetriesFailure)
	case TaskPreempted:
		if o.WasAssigned {
			return b, ShouldRetry
		}
		b.PreemptionCount++
		return b, within(b.PreemptionCount, b.MaxRetriesPreemption)
	case TaskWorkerFailed:
		b.PreemptionCount++
		return b, within(b.PreemptionCount, b.MaxRetriesPreemption)
	}
	return b, NoRetry
}

func within(count, limit int) RetryResult {
	if count <= limit {
		return ShouldRetry
	}
	return ExceededRetryLimit
}

// RetryNumber returns the counter an outcome charged (before → after), the
// retry's number for its backoff, or 1 for a free retry.
func RetryNumber(before, after Budget) int {
	switch {
	case after.FailureCount > before.FailureCount:
		return after.FailureCount
	case after.SystemFailureCount > before.SystemFailureCount:
		return after.SystemFailureCount
	case after.PreemptionCount > before.PreemptionCount:
		return after.PreemptionCount
	}
	return 1
}
