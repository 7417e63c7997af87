package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/queue"
)

// ResyncConfig tunes the resync (KubeVela's state keep).
type ResyncConfig struct {
	// Period is the wait from the end of one resync to the start of the next,
	// in which placement runs. Default 5m.
	Period time.Duration
	// DispatchGrace: an ASSIGNED attempt older than this is re-dispatched
	// (asynq dedupes by attempt id). Default 30s.
	DispatchGrace time.Duration
	// Limit caps the runs, attempts and dispatches one resync visits of
	// each. Default 10000.
	Limit int
}

func (c *ResyncConfig) defaults() {
	c.Period = cmp.Or(c.Period, 5*time.Minute)
	c.DispatchGrace = cmp.Or(c.DispatchGrace, 30*time.Second)
	c.Limit = cmp.Or(c.Limit, 10000)
}

// ResyncResult counts what a resync repaired.
type ResyncResult struct {
	Runs, Evaluated, Redispatched int
}

// resync runs resyncOnce and logs what it did.
func (s *Scheduler) resync(ctx context.Context) {
	res, err := s.resyncOnce(ctx)
	if err != nil {
		s.log.Warn("resync incomplete", "err", err)
	}
	s.log.Info("resync done", "runs", res.Runs, "evaluated", res.Evaluated, "redispatched", res.Redispatched)
}

// resyncOnce re-derives work from Postgres (KubeVela's state keep): it
// advances every unfinished run and every run waiting to restart, evaluates
// finished attempts nobody evaluated, and re-dispatches ASSIGNED attempts
// whose message may have been lost. asynq's TaskIDs make a re-dispatch of a still-queued attempt a no-op.
// A failed item is left to the next resync; the error joins the failed
// listings.
func (s *Scheduler) resyncOnce(ctx context.Context) (ResyncResult, error) {
	var res ResyncResult
	cfg := s.cfg.Resync
	runs, errRuns := s.store.Runs().UnfinishedRuns(ctx, cfg.Limit)
	restarts, errRestarts := s.store.Runs().RestartRequestedRuns(ctx, cfg.Limit) // ended, so not unfinished
	for _, k := range append(runs, restarts...) {
		if _, err := s.advance(ctx, k); err == nil {
			res.Runs++
		}
	}
	ids, errIDs := s.store.Attempts().UnevaluatedAttempts(ctx, cfg.Limit)
	for _, id := range ids {
		if _, err := s.evaluate(ctx, id); err == nil {
			res.Evaluated++
		}
	}
	assigned, errAssigned := s.store.Attempts().AssignedAttempts(ctx, time.Now().Add(-cfg.DispatchGrace), cfg.Limit)
	for _, a := range assigned {
		if a.WorkerID == nil {
			continue
		}
		if err := s.queue.Enqueue(ctx, queue.NewAttemptRunTask(*a.WorkerID, a.ID, nil)); err == nil {
			res.Redispatched++
		}
	}
	return res, errors.Join(listing("unfinished runs", errRuns), listing("runs to restart", errRestarts),
		listing("unevaluated attempts", errIDs), listing("assigned attempts", errAssigned))
}

// listing names the failed listing of resyncOnce that err is from; nil
// stays nil.
func listing(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("list %s: %w", what, err)
}
