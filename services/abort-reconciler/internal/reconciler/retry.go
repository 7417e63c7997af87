package reconciler

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/hibiken/asynq"
)

// RetryError is what HandleActionAbort returns when the same asynq task must
// run again after Delay: the abort is still pending in Postgres. Keeping the
// same task (same TaskID) keeps the dedupe through the backoff, so a push
// meanwhile is a no-op (what Flyte's AbortReconciler gets from its
// in-memory dedupe queue).
type RetryError struct {
	// Delay is how long asynq waits before the retry. asynq v0.26 stores
	// retry times in whole Unix seconds (rdb.Retry: processAt.Unix()), so the
	// task becomes due at floor(now+Delay), up to 1s early; the reconciler
	// remembers the true due time and requeues an early delivery for the
	// rest (see dueTimes).
	Delay time.Duration
	// Attempt is the abort_attempt_count of the failed round; 0 when the
	// round failed before the attempt was counted.
	Attempt int
	// Err is why the round failed.
	Err error
}

// Error renders "abort attempt N failed, retry in D: cause".
func (e *RetryError) Error() string {
	return fmt.Sprintf("abort attempt %d failed, retry in %s: %v", e.Attempt, e.Delay, e.Err)
}

// Unwrap returns the cause.
func (e *RetryError) Unwrap() error { return e.Err }

// IsRetry reports whether err is (or wraps) a *RetryError.
func IsRetry(err error) bool {
	var re *RetryError
	return errors.As(err, &re)
}

// retryDelay is the asynq server's RetryDelayFunc: the Delay of a
// *RetryError, else (a panic, a lease lost) full jitter on asynq's own retry
// count.
func retryDelay(backoff domain.Backoff) asynq.RetryDelayFunc {
	return func(n int, err error, _ *asynq.Task) time.Duration {
		var re *RetryError
		if errors.As(err, &re) {
			return re.Delay
		}
		return backoff.Delay(n + 1)
	}
}

// isFailure is the asynq server's IsFailure: a *RetryError is an expected,
// scheduled retry, so asynq neither counts it toward the task's MaxRetry nor
// records it as a failed task. Only Postgres's abort_attempt_count ends an
// abort; were asynq to archive the task, its TaskID would block every later
// push of the same abort.
func isFailure(err error) bool { return !IsRetry(err) }

// errEarly is the cause of the RetryError that requeues a retry asynq
// delivered before its backoff ended.
var errEarly = errors.New("retry delivered before its backoff ended")

// dueTimes remembers when each retry this process scheduled is due, by
// TaskID, so that a retry asynq delivers early (its times are whole seconds)
// is requeued for the rest instead of running before its full-jitter delay
// ends. The requeue keeps the task out of the active state, where a crash
// would strand it until asynq's lease recovery. A retry picked up by another
// replica, or after a restart, runs when asynq delivers it: up to 1s early.
type dueTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

// dueSlack is how early a retry may run and still count as due.
const dueSlack = time.Millisecond

// set records that id's retry is due at at.
func (d *dueTimes) set(id string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at == nil {
		d.at = map[string]time.Time{}
	}
	d.at[id] = at
}

// remaining returns how long until id's retry is due, or 0 when it is due
// (and then forgets it).
func (d *dueTimes) remaining(id string, now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.at[id]
	if !ok {
		return 0
	}
	if rest := at.Sub(now); rest > dueSlack {
		return rest
	}
	delete(d.at, id)
	return 0
}

// prune forgets the retries due before cutoff: another replica ran them, or
// their request was cleared meanwhile.
func (d *dueTimes) prune(cutoff time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, at := range d.at {
		if at.Before(cutoff) {
			delete(d.at, id)
		}
	}
}
