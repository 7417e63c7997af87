package scheduler

import (
	"context"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
)

// enqueueEvaluate pushes an attempt's evaluation; a failed push is healed
// by the resync.
func (s *Scheduler) enqueueEvaluate(ctx context.Context, attemptID int64) {
	if err := s.queue.Enqueue(ctx, queue.NewTaskEvaluateTask(attemptID)); err != nil {
		s.log.Warn("enqueue evaluation failed; the resync evaluates it", "attempt_id", attemptID, "err", err)
	}
}

// enqueueAbort pushes an action's abort; a failed push is healed by the
// reconciler's periodic scan of abort_requested_at.
func (s *Scheduler) enqueueAbort(ctx context.Context, key domain.ActionKey) {
	if err := s.queue.Enqueue(ctx, queue.NewActionAbortTask(key, s.cfg.AbortMaxRetry)); err != nil {
		s.log.Warn("enqueue abort failed; the reconciler's scan delivers it", "action", key.String(), "err", err)
	}
}

// killAttempt pushes the delivery of an attempt's recorded kill request; a
// failed push is healed by the reconciler's periodic scan.
func (s *Scheduler) killAttempt(ctx context.Context, attemptID int64) {
	if err := s.queue.Enqueue(ctx, queue.NewAttemptKillTask(attemptID, s.cfg.AbortMaxRetry)); err != nil {
		s.log.Warn("enqueue attempt kill failed; the reconciler's scan delivers it", "attempt_id", attemptID, "err", err)
	}
}
