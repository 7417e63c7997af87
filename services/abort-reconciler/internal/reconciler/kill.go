package reconciler

import (
	"context"
	"fmt"
	"github.com/capstan-run/capstan/pkg/domain"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
)

// killReason is the reason sent with an attempt kill of cause.
func killReason(cause string) string { return "attempt kill: " + cause }

// deliverKill asks the executor holding attempt id to kill it with the
// kill's cause. An attempt that already ended needs nothing; one whose
// executor answers not found, or whose worker is gone, is recorded ended
// with the cause, and the scheduler is asked to evaluate it when its task
// still counts on it.
func (r *Reconciler) deliverKill(ctx context.Context, id int64) (round, error) {
	var rd round
	kt, err := r.store.GetKillTarget(ctx, id)
	if err != nil {
		return rd, fmt.Errorf("get kill target: %w", err)
	}
	rd.requestedAt = kt.RequestedAt
	if !kt.Live {
		rd.gone = 1 // it ended on its own before the kill landed
		r.metrics.alreadyTerminated.WithLabelValues(kindAttempt).Inc()
		return rd, nil
	}
	results, errs := r.callAll(ctx, []store.LiveAttempt{kt.LiveAttempt}, killReason(kt.Cause), kt.Cause)
	switch results[0] {
	case outcomeKilled:
		rd.killed = 1
		return rd, nil
	case outcomeGone:
		evaluate, err := r.store.MarkKillGone(ctx, id, kt.Cause)
		if err != nil {
			return rd, fmt.Errorf("mark attempt gone: %w", err)
		}
		rd.gone = 1
		r.metrics.alreadyTerminated.WithLabelValues(kindAttempt).Inc()
		if evaluate {
			r.evaluate(ctx, id)
		}
		return rd, nil
	}
	return rd, errs[0]
}

// evaluate asks the scheduler to apply attempt id's end to its task. A lost
// push is healed by the scheduler's scan of unevaluated attempts.
func (r *Reconciler) evaluate(ctx context.Context, id int64) {
	err := r.enq.Enqueue(ctx, queue.NewTaskEvaluateTask(id), asynq.Queue(r.cfg.SchedulerQueue))
	if err != nil {
		r.log.Warn("enqueue attempt evaluation failed; the scheduler's scan will evaluate it", "attempt_id", id,
			"err", err)
	}
}

// advanceRun asks the scheduler to advance a run whose abort was just
// delivered: its processes are gone, so a concurrency slot it held is free
// and the scheduler starts the next run in its key's line. A lost push is
// healed by the scheduler's sweep of the lines.
func (r *Reconciler) advanceRun(ctx context.Context, key domain.RunKey) {
	if err := r.enq.Enqueue(ctx, queue.NewRunAdvanceTask(key), asynq.Queue(r.cfg.SchedulerQueue)); err != nil {
		r.log.Warn("enqueue run advance failed; the scheduler's sweep starts the next run of its line", "run", key.String(),
			"err", err)
	}
}
