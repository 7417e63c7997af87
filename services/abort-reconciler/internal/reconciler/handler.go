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

// HandleActionAbort handles queue.TypeActionAbort: one delivery round of one
// abort (Flyte's processTask, seeds/000 "Worker Execution"). It returns nil
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
		return fmt.Errorf("%s payload: %v: %w", t.Type(), err, asynq.SkipRetry)
	}
	start := time.Now()
	defer func() { r.metrics.deliverySeconds.Observe(time.Since(start).Seconds()) }()
	return r.reconcile(ctx, key)
}

// reconcile counts the round in Postgres first (a crash keeps the count),
// then delivers, then records the outcome.
func (r *Reconciler) reconcile(ctx context.Context, key domain.ActionKey) error {
	count, err := r.store.MarkAbortAttempt(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		r.log.Debug("abort no longer pending", "key", key.String())
		return nil
	}
	if err != nil {
		// Not counted: Postgres decides when to give up, and it did not
		// answer. Retry soon, for as long as it takes.
		r.log.Warn("abort attempt not recorded, will retry", "key", key.String(), "delay", r.cfg.InitialDelay, "err", err)
		return &RetryError{Delay: r.cfg.InitialDelay, Err: fmt.Errorf("mark abort attempt: %w", err)}
	}
	rd, err := r.deliver(ctx, key)
	if err != nil {
		return r.failed(ctx, key, count, rd, err)
	}
	return r.finish(ctx, key, count, rd, store.AbortDelivered)
}

// failed handles a round that left a live attempt behind (seeds/000
// "Exponential Backoff with Jitter", "Max Attempts and Manual
// Intervention"): below MaxAttempts it schedules the same task after
// FullJitter.Delay(count), uniform in [0, min(MaxDelay, InitialDelay·2^(count-1))];
// at MaxAttempts it logs, clears the abort as needs_intervention and stops.
func (r *Reconciler) failed(ctx context.Context, key domain.ActionKey, count int, rd round, cause error) error {
	if count >= r.cfg.MaxAttempts {
		r.log.Error("abort failed, manual intervention may be required", "key", key.String(), "attempts", count,
			"max_attempts", r.cfg.MaxAttempts, "err", cause)
		return r.finish(ctx, key, count, rd, store.AbortNeedsIntervention)
	}
	delay := r.backoff.Delay(count)
	r.metrics.retried.Inc()
	r.log.Warn("abort delivery failed, will retry", "key", key.String(), "attempts", count,
		"max_attempts", r.cfg.MaxAttempts, "delay", delay, "err", cause)
	return &RetryError{Delay: delay, Attempt: count, Err: cause}
}

// finish clears the abort request with outcome. A clear that fails is
// retried after InitialDelay; the next round finds the attempts gone and
// clears again.
func (r *Reconciler) finish(ctx context.Context, key domain.ActionKey, count int, rd round, outcome string) error {
	if err := r.store.ClearAbortRequest(ctx, key, outcome); err != nil {
		r.log.Warn("abort request not cleared, will retry", "key", key.String(), "outcome", outcome, "err", err)
		return &RetryError{Delay: r.cfg.InitialDelay, Attempt: count, Err: fmt.Errorf("clear abort request: %w", err)}
	}
	if rd.requestedAt != nil {
		r.metrics.completionSeconds.Observe(time.Since(*rd.requestedAt).Seconds())
	}
	if outcome == store.AbortNeedsIntervention {
		r.metrics.givenUp.Inc()
		return nil
	}
	r.metrics.delivered.Inc()
	r.log.Info("abort delivered", "key", key.String(), "attempts", count, "killed", rd.killed,
		"already_terminated", rd.gone)
	return nil
}
