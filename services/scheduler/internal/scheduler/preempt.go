package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// preemptAttempt evicts a live attempt for a higher band (Iris's
// preempt_task). An attempt still ASSIGNED never started: it becomes
// PREEMPTED at once and its task is requeued for free, in one transaction
// that takes the lock order (run, action, task, then the attempt). A started
// attempt (BUILDING or RUNNING) gets a kill request with cause preempted
// (killRequested): the reconciler stops its process, and the executor's
// PREEMPTED report charges the task's preemption budget and requeues it; its
// resources stay held until then, so nothing is placed on top of a process
// that still runs.
func (s *Scheduler) preemptAttempt(ctx context.Context, attemptID int64) (ev Evaluation, killRequested bool, err error) {
	err = s.store.InTx(ctx, func(tx *store.Store) error {
		ev, killRequested = Evaluation{}, false
		run, act, t, a, err := tx.Tasks().LockAttemptOwners(ctx, attemptID)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		claimed, ok, err := tx.Attempts().PreemptAssignedAttempt(ctx, t, attemptID, now)
		if err != nil {
			return err
		}
		if ok {
			return s.decide(ctx, tx, &ev, run, act, t, claimed, true, now)
		}
		if !a.State.IsLive() {
			return nil
		}
		err = tx.Aborts().RequestAttemptKill(ctx, attemptID, domain.CausePreempted)
		if errors.Is(err, store.ErrTerminal) {
			return nil // it ended meanwhile: nothing to evict
		}
		killRequested = err == nil
		return err
	})
	if err == nil && ev.Done {
		s.metrics.evaluated.WithLabelValues(ev.Result.String()).Inc()
		s.afterEvaluation(ctx, ev)
	}
	return ev, killRequested, err
}
