package scheduler

import (
	"context"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/store"
)

// evaluateSucceeded evaluates, in one transaction, the SUCCEEDED attempts
// of ids, one a run (store.LockAndClaimAttempts), and returns the ids it
// left for the caller to evaluate one by one (evaluate): the attempts that
// did not succeed (a platform failure goes through ARC's rule first), a
// second one of a run, and all of them when the transaction fails.
//
// The transaction locks every run first, then the actions, tasks and
// attempts, level by level, in one statement. It then settles each attempt
// (task, action, cache) and only then advances the runs whose action
// ended, so that the runs' root moves wait for the commit and are made in
// one statement with all the events (store.SetRootPhase). An advance locks
// only rows of its own run, whose lock the transaction holds, or the
// catalog's, which no holder of a run's row waits on. It runs on
// EachCall's pool (the claim takes a list of ids; the root moves of
// several runs are one statement of arrays), and its statements of one row
// each keep their plans (store.KeepPlans).
func (s *Scheduler) evaluateSucceeded(ctx context.Context, ids []int64) []int64 {
	var evs []Evaluation
	var claimedIDs []int64
	err := s.store.EachCall().InTx(ctx, func(tx *store.Store) error {
		evs, claimedIDs = nil, nil
		now := time.Now().UTC()
		claimed, err := tx.LockAndClaimAttempts(ctx, ids, now)
		if err != nil || len(claimed) == 0 {
			return err
		}
		if err := tx.KeepPlans(ctx); err != nil {
			return err
		}
		evs = make([]Evaluation, len(claimed))
		for i, o := range claimed {
			claimedIDs = append(claimedIDs, o.Attempt.ID)
			if err := s.settle(ctx, tx, &evs[i], o.Action, o.Task, o.Attempt, false, now); err != nil {
				return err
			}
		}
		for i, o := range claimed {
			if !evs[i].advances() {
				continue
			}
			if err := s.advanceRun(ctx, tx, &evs[i], o.Run, o.Action, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("batched evaluation failed; each attempt is evaluated on its own", "attempts", len(ids), "err", err)
		return ids
	}
	done := map[int64]bool{}
	for i, ev := range evs {
		done[claimedIDs[i]] = true
		s.metrics.evaluated.WithLabelValues(ev.Result.String()).Inc()
		s.afterEvaluation(ctx, ev)
	}
	return slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return done[id] })
}
