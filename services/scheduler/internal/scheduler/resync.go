package scheduler

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/queue"
)

// ResyncResult counts what a resync repaired.
type ResyncResult struct {
	Runs, Evaluated, Redispatched int
}

// resync re-derives work from Postgres (KubeVela's state keep): it advances
// every unfinished run, evaluates finished attempts nobody evaluated, and
// re-dispatches ASSIGNED attempts whose message may have been lost. asynq's
// TaskIDs make a re-dispatch of a still-queued attempt a no-op.
func (s *Scheduler) resync(ctx context.Context) ResyncResult {
	var res ResyncResult
	runs, err := s.store.UnfinishedRuns(ctx, 10000)
	if err != nil {
		s.log.Warn("resync: list runs failed", "err", err)
	}
	for _, k := range runs {
		if err := s.advance(ctx, k); err == nil {
			res.Runs++
		}
	}
	ids, err := s.store.UnevaluatedAttempts(ctx, 10000)
	if err != nil {
		s.log.Warn("resync: list attempts failed", "err", err)
	}
	for _, id := range ids {
		if err := s.evaluate(ctx, id); err == nil {
			res.Evaluated++
		}
	}
	assigned, err := s.store.AssignedAttempts(ctx, time.Now().Add(-s.cfg.DispatchGrace), 10000)
	if err != nil {
		s.log.Warn("resync: list assigned failed", "err", err)
	}
	for _, a := range assigned {
		if a.WorkerID == nil {
			continue
		}
		if err := s.queue.Enqueue(ctx, queue.NewAttemptRunTask(*a.WorkerID, a.ID)); err == nil {
			res.Redispatched++
		}
	}
	s.log.Info("resync done", "runs", res.Runs, "evaluated", res.Evaluated, "redispatched", res.Redispatched)
	return res
}
