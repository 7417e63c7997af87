package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
)

// Kinds of work, the values of the metrics' kind label.
const (
	// kindAction is an action's abort (queue.TypeActionAbort).
	kindAction = "action"
	// kindAttempt is one attempt's kill (queue.TypeAttemptKill).
	kindAttempt = "attempt"
)

// job is one pending abort or kill as the shared round logic sees it.
type job interface {
	// kind is kindAction or kindAttempt.
	kind() string
	// taskID is the asynq TaskID, the dedupe key; also the job's name in logs.
	taskID() string
	// mark counts a delivery round in Postgres and returns the new count;
	// store.ErrNotFound when nothing is pending any more.
	mark(ctx context.Context) (int, error)
	// deliver asks the executors to kill what is left, and records what is
	// already gone; its error means something may still run.
	deliver(ctx context.Context) (round, error)
	// clear ends the request with outcome.
	clear(ctx context.Context, outcome string) error
}

// HandleActionAbort handles queue.TypeActionAbort: one delivery round of one
// abort (Flyte's AbortReconciler.processTask). It returns nil
// when the abort is finished (delivered, no longer pending, or given up
// after MaxAttempts), a *RetryError when the same task must run again after
// its Delay, and an error wrapping asynq.SkipRetry for a payload that can
// never be handled.
func (r *Reconciler) HandleActionAbort(ctx context.Context, t *asynq.Task) error {
	var p queue.AbortPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	key, err := domain.ParseActionKey(p.Key)
	if err != nil {
		return fmt.Errorf("%s payload: %w: %w", t.Type(), err, asynq.SkipRetry)
	}
	return r.handle(ctx, actionJob{r: r, key: key})
}

// HandleAttemptKill handles queue.TypeAttemptKill: one delivery round of one
// attempt's kill, exactly as HandleActionAbort does for an action.
func (r *Reconciler) HandleAttemptKill(ctx context.Context, t *asynq.Task) error {
	var p queue.AttemptPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	if p.AttemptID <= 0 {
		return fmt.Errorf("%s payload: attempt id %d: %w", t.Type(), p.AttemptID, asynq.SkipRetry)
	}
	return r.handle(ctx, killJob{r: r, id: p.AttemptID})
}

// handle runs one round of j, unless asynq delivered its retry before the
// backoff ended (see RetryError.Delay): then it waits out the rest, uncounted.
func (r *Reconciler) handle(ctx context.Context, j job) error {
	if rest := r.due.remaining(j.taskID(), time.Now()); rest > 0 {
		r.log.Debug("abort retry due later, requeued", "kind", j.kind(), "key", j.taskID(), "delay", rest)
		return r.retry(j, &RetryError{Delay: rest, Err: errEarly})
	}
	start := time.Now()
	defer func() { r.metrics.deliverySeconds.WithLabelValues(j.kind()).Observe(time.Since(start).Seconds()) }()
	err := r.reconcile(ctx, j)
	var re *RetryError
	if errors.As(err, &re) {
		return r.retry(j, re)
	}
	return err
}

// retry remembers when j's retry is due and returns re for asynq.
func (r *Reconciler) retry(j job, re *RetryError) error {
	r.due.set(j.taskID(), time.Now().Add(re.Delay))
	return re
}

// reconcile counts the round in Postgres first (a crash keeps the count),
// then delivers, then records the outcome.
func (r *Reconciler) reconcile(ctx context.Context, j job) error {
	count, err := j.mark(ctx)
	if errors.Is(err, store.ErrNotFound) {
		r.log.Debug("abort no longer pending", "kind", j.kind(), "key", j.taskID())
		return nil
	}
	if err != nil {
		// Not counted: Postgres decides when to give up, and it did not
		// answer. Retry soon, for as long as it takes.
		r.log.Warn("abort attempt not recorded, will retry", "kind", j.kind(), "key", j.taskID(),
			"delay", r.cfg.InitialDelay, "err", err)
		return &RetryError{Delay: r.cfg.InitialDelay, Err: fmt.Errorf("mark abort attempt: %w", err)}
	}
	if count == 1 {
		r.metrics.requested.WithLabelValues(j.kind()).Inc()
	}
	rd, err := j.deliver(ctx)
	if err != nil {
		return r.failed(ctx, j, count, rd, err)
	}
	return r.finish(ctx, j, count, rd, store.AbortDelivered)
}

// failed handles a round that left a live attempt behind (Flyte's
// AbortReconciler: full-jitter backoff, then manual intervention after
// MaxAttempts): below MaxAttempts it schedules the same task after
// FullJitter.Delay(count), uniform in [0, min(MaxDelay, InitialDelay·2^(count-1))];
// at MaxAttempts it logs, clears the request as needs_intervention and stops.
func (r *Reconciler) failed(ctx context.Context, j job, count int, rd round, cause error) error {
	if count >= r.cfg.MaxAttempts {
		r.log.Error("abort failed, manual intervention may be required", "kind", j.kind(), "key", j.taskID(),
			"attempts", count, "max_attempts", r.cfg.MaxAttempts, "err", cause)
		return r.finish(ctx, j, count, rd, store.AbortNeedsIntervention)
	}
	delay := r.backoff.Delay(count)
	r.metrics.retried.WithLabelValues(j.kind()).Inc()
	r.log.Warn("abort delivery failed, will retry", "kind", j.kind(), "key", j.taskID(), "attempts", count,
		"max_attempts", r.cfg.MaxAttempts, "delay", delay, "err", cause)
	return &RetryError{Delay: delay, Attempt: count, Err: cause}
}

// finish clears the request with outcome. A clear that fails is retried
// after InitialDelay; the next round finds the attempts gone and clears
// again.
func (r *Reconciler) finish(ctx context.Context, j job, count int, rd round, outcome string) error {
	if err := j.clear(ctx, outcome); err != nil {
		r.log.Warn("abort request not cleared, will retry", "kind", j.kind(), "key", j.taskID(), "outcome", outcome,
			"err", err)
		return &RetryError{Delay: r.cfg.InitialDelay, Attempt: count, Err: fmt.Errorf("clear abort request: %w", err)}
	}
	if rd.requestedAt != nil {
		r.metrics.completionSeconds.WithLabelValues(j.kind(), outcome).Observe(time.Since(*rd.requestedAt).Seconds())
	}
	if outcome == store.AbortNeedsIntervention {
		r.metrics.givenUp.WithLabelValues(j.kind()).Inc()
		return nil
	}
	r.metrics.delivered.WithLabelValues(j.kind()).Inc()
	if aj, ok := j.(actionJob); ok {
		r.advanceRun(ctx, aj.key.RunKey)
	}
	r.log.Info("abort delivered", "kind", j.kind(), "key", j.taskID(), "attempts", count, "killed", rd.killed,
		"already_terminated", rd.gone)
	return nil
}

// actionJob is the abort of an action and everything under it.
type actionJob struct {
	r   *Reconciler
	key domain.ActionKey
}

func (j actionJob) kind() string   { return kindAction }
func (j actionJob) taskID() string { return j.key.String() }
func (j actionJob) mark(ctx context.Context) (int, error) {
	return j.r.store.MarkAbortAttempt(ctx, j.key)
}
func (j actionJob) deliver(ctx context.Context) (round, error) { return j.r.deliver(ctx, j.key) }
func (j actionJob) clear(ctx context.Context, outcome string) error {
	return j.r.store.ClearAbortRequest(ctx, j.key, outcome)
}

// killJob is the kill of one attempt.
type killJob struct {
	r  *Reconciler
	id int64
}

func (j killJob) kind() string   { return kindAttempt }
func (j killJob) taskID() string { return queue.AttemptKillTaskID(j.id) }
func (j killJob) mark(ctx context.Context) (int, error) {
	return j.r.store.MarkKillAttempt(ctx, j.id)
}
func (j killJob) deliver(ctx context.Context) (round, error) { return j.r.deliverKill(ctx, j.id) }
func (j killJob) clear(ctx context.Context, outcome string) error {
	return j.r.store.ClearKillRequest(ctx, j.id, outcome)
}
