package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
)

// maxStartBatch bounds the runs one start transaction takes.
const maxStartBatch = 64

// startGate gathers the runs whose run:start messages are handled at the
// same time, so that their first advances share a transaction (group
// commit): a handler queues its run and waits; whichever handler holds a
// token takes every queued run (up to maxStartBatch) and starts them in one
// transaction. An idle scheduler starts a lone run at once, as before.
type startGate struct {
	mu      sync.Mutex
	pending []*startReq
	tokens  chan struct{} // one per start transaction in flight
}

// startReq is one run waiting in the gate, and where its result goes.
type startReq struct {
	key  domain.RunKey
	done chan error // buffered: a result is never waited for in vain
}

// take removes and returns up to maxStartBatch waiting runs.
func (g *startGate) take() []*startReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := min(len(g.pending), maxStartBatch)
	batch := slices.Clone(g.pending[:n])
	g.pending = slices.Delete(g.pending, 0, n)
	return batch
}

// handleRunStart is the run:start handler: it starts the run through the
// gate (start).
func (s *Scheduler) handleRunStart(ctx context.Context, t *asynq.Task) error {
	var p queue.RunPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	return s.start(ctx, p.Key())
}

// start advances a new run as advance does, in a transaction shared with
// the other runs started at the same time (startGate, startRuns); the
// handler holding the token makes that transaction with its own ctx.
// Errors: those of advance (asynq.SkipRetry for a run that does not exist),
// ctx's when it ends first (the run may be started later by another
// handler's transaction; the retried message then finds it started).
func (s *Scheduler) start(ctx context.Context, key domain.RunKey) error {
	g := &s.starts
	req := &startReq{key: key, done: make(chan error, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, req)
	g.mu.Unlock()
	for {
		select {
		case err := <-req.done:
			return err
		case g.tokens <- struct{}{}:
			batch := g.take()
			if len(batch) == 0 { // another handler took req: wait for it
				<-g.tokens
				select {
				case err := <-req.done:
					return err
				case <-ctx.Done():
					return fmt.Errorf("wait to start run %s: %w", key, ctx.Err())
				}
			}
			keys := make([]domain.RunKey, len(batch))
			for i, r := range batch {
				keys[i] = r.key
			}
			for i, err := range s.startRuns(ctx, keys) {
				batch[i].done <- err
			}
			<-g.tokens
		case <-ctx.Done():
			return fmt.Errorf("wait to start run %s: %w", key, ctx.Err())
		}
	}
}

// startRuns advances the named runs (advanceRuns) and returns one error
// per key, in order.
func (s *Scheduler) startRuns(ctx context.Context, keys []domain.RunKey) []error {
	_, errs := s.advanceRuns(ctx, keys)
	return errs
}

// advanceRuns advances the named runs and returns, for each key in order,
// its advance and its error. The runs that no other transaction holds are
// advanced in one transaction (advanceLocked); every other run, all of
// them when that transaction fails, is advanced on its own (advanceAlone),
// waiting for its lock.
func (s *Scheduler) advanceRuns(ctx context.Context, keys []domain.RunKey) ([]Advance, []error) {
	advs := make([]*Advance, len(keys))
	fp := s.freshPlacement()
	defer fp.finish(ctx, false) // on a panic
	var after afterAdmission
	err := s.store.InTx(ctx, func(tx *store.Store) error {
		clear(advs)
		after = afterAdmission{}
		return s.advanceLocked(ctx, tx, keys, advs, fp, &after)
	})
	fp.finish(ctx, err == nil)
	if err != nil {
		s.log.Warn("batched advance failed; each run advances on its own", "runs", len(keys), "err", err)
		clear(advs)
	} else {
		s.finishAdmission(ctx, after)
	}
	out, errs := make([]Advance, len(keys)), make([]error, len(keys))
	for i, adv := range advs {
		if adv != nil {
			out[i] = s.afterAdvance(ctx, *adv)
			continue
		}
		out[i], errs[i] = s.advanceAlone(ctx, keys[i])
	}
	return out, errs
}

// advanceLocked is advanceRuns's transaction: it locks the runs of keys
// that no other transaction holds (store.TryLockRuns, the lock order's
// first level), and sets advs[i] for each run of keys it advanced. The
// runs whose advance is a fresh run's first (freshStart: plain task steps
// to start) are expanded and started together, in one statement whatever
// their number (store.ExpandAndStartRuns), and on the leader fp places
// their tasks before their root moves, when the lock statement got the
// placement lock; every other run it locked advances
// from its step actions (progressFrom), in key order, writing only its own
// run's rows. A repeated key, and a run held by another transaction, are
// left to advanceAlone.
func (s *Scheduler) advanceLocked(ctx context.Context, tx *store.Store, keys []domain.RunKey, advs []*Advance,
	fp *freshPlacement, after *afterAdmission) error {
	runs, locked, err := tx.Runs().TryLockRuns(ctx, keys, fp != nil)
	if err != nil {
		return fmt.Errorf("try to lock %d runs: %w", len(keys), err)
	}
	fp.lockedPlacement(locked)
	now := s.now()
	if *after, err = s.admitLocked(ctx, tx, keys, runs, advs, now); err != nil {
		return fmt.Errorf("admit runs: %w", err)
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmpKeys(keys[a], keys[b]) })
	var fresh []store.FreshRun
	var picked []int          // the index in keys of each of fresh
	var phases []domain.Phase // the run phase each of fresh decided
	for _, i := range order {
		run, ok := runs[keys[i]]
		if !ok {
			continue
		}
		delete(runs, keys[i]) // a repeated key is advanced on its own
		if p, fr, ok := s.freshStart(run, now); ok && run.RestartRequestedAt == nil {
			fresh, picked, phases = append(fresh, fr), append(picked, i), append(phases, p.Phase)
			advs[i] = &Advance{Phase: domain.Phase(run.Phase), Started: p.Start, kin: kinWork{parent: parentRun(run)}}
			continue
		}
		adv, err := s.progressFrom(ctx, tx, run, nil, nil, judging{}, now)
		if err != nil {
			return fmt.Errorf("advance run %s: %w", keys[i], err)
		}
		advs[i] = &adv
	}
	return s.startFresh(ctx, tx, keys, advs, fresh, picked, phases, fp, now)
}

// admitLocked admits the runs of runs (locked by tx, the runs of keys)
// that wait for a slot (waitsForSlot), together (admit): an admitted run
// stays in runs, with its slot; every other leaves runs, its advance (in
// advs, at its first index in keys) done: waiting, or ended ABORTED. It
// returns what the admission leaves for after the commit.
func (s *Scheduler) admitLocked(ctx context.Context, tx *store.Store, keys []domain.RunKey, runs map[domain.RunKey]store.Run,
	advs []*Advance, now time.Time) (afterAdmission, error) {
	var waiting []*store.Run
	for _, run := range runs {
		if waitsForSlot(run) {
			waiting = append(waiting, &run)
		}
	}
	if len(waiting) == 0 {
		return afterAdmission{}, nil
	}
	sortRuns(waiting)
	a, err := s.admit(ctx, tx, waiting, now)
	if err != nil {
		return afterAdmission{}, err
	}
	first := map[domain.RunKey]int{}
	for i := len(keys) - 1; i >= 0; i-- {
		first[keys[i]] = i
	}
	for _, run := range waiting {
		k := runKeyOf(*run)
		if a.admitted[k] {
			runs[k] = *run
			continue
		}
		delete(runs, k)
		adv := &Advance{Phase: domain.Phase(run.Phase)}
		if a.ended[k] {
			adv.Phase = domain.PhaseAborted
		}
		advs[first[k]] = adv
	}
	return a.after, nil
}

// startFresh expands and starts the fresh runs advanceLocked picked (fresh,
// at picked in keys, each deciding the run phase of phases), has fp place
// their tasks, then moves their roots. A run expanded before (by another
// transaction) is left to advanceAlone.
func (s *Scheduler) startFresh(ctx context.Context, tx *store.Store, keys []domain.RunKey, advs []*Advance,
	fresh []store.FreshRun, picked []int, phases []domain.Phase, fp *freshPlacement, now time.Time) error {
	if len(fresh) == 0 {
		return nil
	}
	expanded, err := tx.Runs().ExpandAndStartRuns(ctx, now, fresh...)
	if err != nil {
		return fmt.Errorf("expand and start %d runs: %w", len(fresh), err)
	}
	var started []domain.RunKey
	for j, i := range picked {
		if !expanded[j] {
			advs[i] = nil // expanded before: advanced on its own
			continue
		}
		started = append(started, keys[i])
	}
	placed, err := fp.place(ctx, tx, started)
	if err != nil {
		return err
	}
	for j, i := range picked {
		if !expanded[j] {
			continue
		}
		advs[i].placed = placed[keys[i]]
		if err := moveRoot(ctx, tx, keys[i], advs[i], phases[j], now); err != nil {
			return fmt.Errorf("run %s: %w", keys[i], err)
		}
	}
	return nil
}

// cmpKeys orders run keys as the lock order does: project, domain, name.
func cmpKeys(a, b domain.RunKey) int {
	return cmp.Or(cmp.Compare(a.Project, b.Project), cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Run, b.Run))
}
