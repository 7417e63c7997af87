package reconciler

import (
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/hibiken/asynq"
)

// RetryError is what HandleActionAbort returns when the same asynq task must
// run again after Delay: the abort is still pending in Postgres. Keeping the
// same task (same TaskID) keeps the dedupe through the backoff, so a push
// meanwhile is a no-op (Flyte's dedupeQueue, seeds/000 "The Deduplication
// Queue").
type RetryError struct {
	// Delay is how long asynq waits before the retry. asynq v0.26 stores
	// retry times in whole Unix seconds, so the task becomes due at
	// floor(now+Delay): never later than Delay, up to 1s earlier.
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
