package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
)

// Register adds the scheduler's handlers to mux.
func (s *Scheduler) Register(mux *asynq.ServeMux) {
	mux.HandleFunc(queue.TypeRunStart, s.handleRun)
	mux.HandleFunc(queue.TypeRunAdvance, s.handleRun)
	mux.HandleFunc(queue.TypeTaskEvaluate, s.handleEvaluate)
}

// handleRun expands a run and starts what may start.
func (s *Scheduler) handleRun(ctx context.Context, t *asynq.Task) error {
	var p queue.RunPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	return s.advance(ctx, p.Key())
}

func (s *Scheduler) advance(ctx context.Context, key domain.RunKey) error {
	adv, err := s.store.AdvanceRun(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("run %s: %w", key, asynq.SkipRetry)
	}
	if err != nil {
		return err
	}
	if len(adv.Started) > 0 {
		s.Kick()
	}
	if adv.Phase.IsTerminal() {
		s.metrics.runsEnded.WithLabelValues(string(adv.Phase)).Inc()
	}
	return nil
}

// handleEvaluate applies a finished attempt to its task, then moves the run.
func (s *Scheduler) handleEvaluate(ctx context.Context, t *asynq.Task) error {
	var p queue.AttemptPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	return s.evaluate(ctx, p.AttemptID)
}

func (s *Scheduler) evaluate(ctx context.Context, attemptID int64) error {
	if err := s.recordWorkerFailure(ctx, attemptID); err != nil {
		return err
	}
	ev, err := s.store.EvaluateAttempt(ctx, attemptID, s.cfg.Retry)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("attempt %d: %w", attemptID, asynq.SkipRetry)
	}
	if err != nil || !ev.Done {
		return err
	}
	s.afterEvaluation(ctx, ev)
	if ev.ActionPhase != "" && !ev.ActionPhase.IsTerminal() {
		// The step runs on: progression, which reads only which steps started
		// and how the ended ones ended, cannot change.
		return nil
	}
	return s.advance(ctx, ev.Run)
}

// afterEvaluation acts on what an evaluation decided: it pushes the abort of
// a failed job's survivors and kicks a pass (a slot freed, or a retry waits).
func (s *Scheduler) afterEvaluation(ctx context.Context, ev store.Evaluation) {
	s.metrics.evaluated.WithLabelValues(ev.Result.String()).Inc()
	if ev.AbortSurvivors != nil {
		s.enqueueAbort(ctx, *ev.AbortSurvivors)
	}
	s.Kick()
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
		s.log.Warn("enqueue attempt kill failed; the reconciler's scan delivers it", "attempt", attemptID, "err", err)
	}
}
