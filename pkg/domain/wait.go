package domain

import (
	"cmp"
	"time"
)

// CodeWaitTimeout is the error code of a task that waited for its target
// longer than its step's wait_timeout.
const CodeWaitTimeout = "WaitTimeout"

// Wait is a task's current run of waits for its target: how many waiting
// attempts in a row it made, and when the first of them was decided. The
// zero Wait is no wait; any other outcome of an attempt ends the run.
type Wait struct {
	// Count is how many waits in a row; 0 when the task does not wait.
	Count int
	// Since is when the first of them was decided; nil when Count is 0.
	Since *time.Time
}

// WaitPolicy is how long and how often a waiting task asks again.
type WaitPolicy struct {
	// Timeout bounds a run of waits from its first, the step's
	// wait_timeout; 0: no bound of its own (the step's timeout still holds).
	Timeout time.Duration
	// Cap caps the backoff between two checks. Default KubeVelaWaitCap (60 s,
	// KubeVela's --max-workflow-wait-backoff-time).
	Cap time.Duration
}

// DecideWait decides a task whose attempt answered, at now, that its target
// is not ready, after the run of waits w: KubeVela marks such a step "as wait
// but not failed and it will wait for healthy", retried after its backoff
// int(0.05·2^(n-1)) s, at least 1 s, at most the waiting cap, n counting
// the waits. It returns ShouldWait with the run one longer and the time the
// task may be placed again, now + KubeVela{Cap}.Delay(n), but never later
// than the end of p.Timeout, so that the last check falls at the deadline;
// or, once the run has lasted p.Timeout, ExceededRetryLimit (code
// CodeWaitTimeout) and w unchanged. Source: KubeVela's workflow backoff
// and "wait for healthy"; the timeout is Capstan's.
func DecideWait(w Wait, p WaitPolicy, now time.Time) (Wait, RetryResult, time.Time) {
	since := now
	if w.Count > 0 && w.Since != nil {
		since = *w.Since
	}
	deadline := since.Add(p.Timeout)
	if p.Timeout > 0 && !now.Before(deadline) {
		return w, ExceededRetryLimit, time.Time{}
	}
	n := w.Count + 1
	notBefore := now.Add(KubeVela{Cap: cmp.Or(p.Cap, KubeVelaWaitCap)}.Delay(n))
	if p.Timeout > 0 && notBefore.After(deadline) {
		notBefore = deadline
	}
	return Wait{Count: n, Since: &since}, ShouldWait, notBefore
}
