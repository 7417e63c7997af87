package scheduler

import (
	"context"
	"sort"
	"time"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
)

// PassResult is what one scheduling pass did.
type PassResult struct {
	Placed  int
	Pending int
	Workers int
}

// pass places PENDING tasks on alive workers with free slots and returns how
// long to wait before the next pass: at once when it filled a whole batch,
// else until the next backoff ends, at most Tick.
func (s *Scheduler) pass(ctx context.Context) time.Duration {
	res, err := s.runOnce(ctx)
	if err != nil {
		s.log.Warn("scheduling pass failed", "err", err)
		return s.cfg.Tick
	}
	if res.Placed > 0 {
		s.log.Debug("scheduling pass", "placed", res.Placed, "pending", res.Pending, "workers", res.Workers)
	}
	if res.Placed == s.cfg.BatchSize {
		return 0
	}
	next := s.cfg.Tick
	if at, err := s.store.NextPendingAt(ctx); err == nil && at != nil {
		next = min(next, max(time.Until(*at), time.Millisecond))
	}
	return next
}

// runOnce is one scheduling pass: spread the oldest placeable tasks over the
// workers with the most free slots.
func (s *Scheduler) runOnce(ctx context.Context) (PassResult, error) {
	start := time.Now()
	defer func() { s.metrics.passSeconds.Observe(time.Since(start).Seconds()) }()
	workers, err := s.store.PlaceableWorkers(ctx, s.cfg.WorkerGrace)
	if err != nil {
		return PassResult{}, err
	}
	free := 0
	for _, w := range workers {
		free += max(w.Slots-w.Used, 0)
	}
	res := PassResult{Workers: len(workers)}
	if free == 0 {
		return res, nil
	}
	tasks, err := s.store.PendingTasks(ctx, min(free, s.cfg.BatchSize))
	if err != nil {
		return res, err
	}
	res.Pending = len(tasks)
	for _, t := range tasks {
		w := mostFree(workers)
		if w == nil {
			break
		}
		attempt, ok, err := s.store.AssignTask(ctx, t.ID, w.ID)
		if err != nil {
			return res, err
		}
		if !ok {
			continue
		}
		w.Used++
		res.Placed++
		s.metrics.placed.Inc()
		if err := s.queue.Enqueue(ctx, queue.NewAttemptRunTask(w.ID, attempt.ID)); err != nil {
			// The attempt is ASSIGNED in Postgres; the resync re-dispatches it.
			s.log.Warn("dispatch failed", "attempt", attempt.ID, "worker", w.ID, "err", err)
		}
	}
	return res, nil
}

// mostFree returns the worker with the most free slots, or nil when all are full.
func mostFree(ws []store.WorkerLoad) *store.WorkerLoad {
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].Slots-ws[i].Used > ws[j].Slots-ws[j].Used })
	if len(ws) == 0 || ws[0].Slots-ws[0].Used <= 0 {
		return nil
	}
	return &ws[0]
}
