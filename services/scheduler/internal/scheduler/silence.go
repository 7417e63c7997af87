package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// silence is what judgeSilence found and did.
type silence struct {
	// Dead are the workers it declared dead.
	Dead []string
	// Silent and Alive count the silent workers and the alive ones (Alive
	// is counted only when some are silent).
	Silent, Alive int
	// Restart is why it restarted every worker's grace; "" when it did not.
	Restart domain.GraceRestart
	// Verdict is domain.JudgeSilence's.
	Verdict domain.SilenceVerdict
	// Confirmed is true when it declared dead the workers of a deferral.
	Confirmed bool
	// Now is the pass's now(), Postgres's clock.
	Now time.Time
}

// judgeSilence decides who is dead (fenced liveness; the contract is
// pkg/domain's, above domain.GraceOrigin), in one transaction on
// Postgres's clock: it locks the liveness watch (LockLivenessWatch), moves
// the grace origin as domain.GraceOrigin says — failed is a previous pass
// of this replica that did not reach Postgres — finds the silent workers
// (SilentWorkers), decides with domain.JudgeSilence, marks dead those it
// declares (MarkWorkersDead: still silent then) and saves the watch. Lock
// order: the watch row, then workers.
func (s *Scheduler) judgeSilence(ctx context.Context, failed bool) (silence, error) {
	var out silence
	grace := s.cfg.WorkerGrace
	err := s.store.InTx(ctx, func(tx *store.Store) error {
		out = silence{}
		w, err := tx.Workers().LockLivenessWatch(ctx)
		if err != nil {
			return fmt.Errorf("lock the liveness watch: %w", err)
		}
		out.Now = w.Now
		origin, restart := domain.GraceOrigin(w, failed, s.cfg.Liveness.Outage)
		out.Restart = restart
		ids, alive, err := tx.Workers().SilentWorkers(ctx, origin, grace)
		if err != nil {
			return fmt.Errorf("find silent workers: %w", err)
		}
		out.Silent, out.Alive = len(ids), alive
		out.Verdict = domain.JudgeSilence(alive, len(ids), w.DeferredAt, w.Now, grace)
		out.Confirmed = out.Verdict.Declare && !w.DeferredAt.IsZero()
		if out.Verdict.Declare {
			if out.Dead, err = tx.Workers().MarkWorkersDead(ctx, ids, origin, grace); err != nil {
				return fmt.Errorf("mark them dead: %w", err)
			}
		}
		if err := tx.Workers().SaveLivenessWatch(ctx, origin, out.Verdict.DeferredAt); err != nil {
			return fmt.Errorf("save the liveness watch: %w", err)
		}
		return nil
	})
	if err != nil {
		return silence{}, err
	}
	s.noteSilence(out)
	return out, nil
}

// noteSilence logs and counts what a judgement did: a grace restart once
// as it begins (not at each pass of an outage), a deferred mass death, a
// confirmed one, each death.
func (s *Scheduler) noteSilence(j silence) {
	s.live.mu.Lock()
	began := j.Restart != "" && j.Restart != s.live.restart
	s.live.restart = j.Restart
	s.live.mu.Unlock()
	grace := s.cfg.WorkerGrace.String()
	if began {
		s.live.restarts.WithLabelValues(string(j.Restart)).Inc()
		s.log.Warn("worker grace restarted", "reason", string(j.Restart), "grace", grace)
	}
	switch {
	case j.Verdict.Suspected:
		s.live.suspected.Inc()
		s.log.Warn("suspected control-plane outage: mass worker death deferred one grace", "silent", j.Silent,
			"alive", j.Alive, "grace", grace, "confirm_after", j.Now.Add(s.cfg.WorkerGrace))
	case j.Confirmed:
		s.log.Warn("deferred worker deaths confirmed after a second grace", "dead", len(j.Dead), "alive", j.Alive,
			"grace", grace)
	}
	for _, id := range j.Dead {
		s.log.Warn("worker declared dead", "worker_id", id, "grace", grace)
	}
}
