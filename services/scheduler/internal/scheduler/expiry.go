package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// ExpiryResult is what one expiry pass did.
type ExpiryResult struct {
	// Unschedulable counts the jobs ended by a scheduling deadline.
	Unschedulable int
	// TimedOut counts the jobs aborted for a task past its timeout.
	TimedOut int
	// Woken counts the runs advanced because a step's timed wait ended.
	Woken int
}

// expiry is the leader's pass over deadlines, timeouts and timed waits
// (Iris's _mark_task_unschedulable and per-task timeout, KubeVela's step
// timeout and backoff), run before each placement pass.
type expiry struct{ s *Scheduler }

// runOnce reads what is due in one statement (store.ExpiryDue), then ends the jobs with a task past its
// scheduling deadline, aborts what is past a timeout, and wakes the runs
// whose timed waits ended.
func (e expiry) runOnce(ctx context.Context) (ExpiryResult, error) {
	var res ExpiryResult
	due, err := e.s.store.Tasks().ExpiryDue(ctx, 1000)
	if err != nil {
		return res, fmt.Errorf("read expiries due: %w", err)
	}
	for _, key := range due.Deadlines {
		ended, err := e.s.expireDeadline(ctx, key)
		if err != nil {
			return res, err
		}
		if ended {
			res.Unschedulable++
		}
	}
	if res.TimedOut, err = e.s.expireTimeouts(ctx, due); err != nil {
		return res, err
	}
	res.Woken = e.s.wakeWaits(ctx, due.Waits)
	return res, nil
}

// wakeWaits advances the runs with a step whose timed wait ended (a
// suspend's duration, a retry's backoff): the wait lives in Postgres, so a
// restarted scheduler, or one whose Redis was wiped, finds it here. It
// returns how many it advanced.
func (s *Scheduler) wakeWaits(ctx context.Context, keys []domain.RunKey) int {
	n := 0
	for _, k := range keys {
		if _, err := s.advance(ctx, k); err != nil {
			s.log.Warn("advance after a wait failed", "run", k.String(), "err", err)
			continue
		}
		n++
	}
	return n
}

// expireDeadline makes the action's PENDING tasks past their scheduling
// deadline UNSCHEDULABLE, derives its phase (UNSCHEDULABLE, the other tasks
// KILLED), releases its cache reservation and advances its run, in one
// transaction under the run's and the action's locks.
func (s *Scheduler) expireDeadline(ctx context.Context, key domain.ActionKey) (bool, error) {
	var ev Evaluation
	err := s.store.InTx(ctx, func(tx *store.Store) error {
		ev = Evaluation{}
		run, act, err := tx.Actions().LockRunAction(ctx, key)
		if err != nil {
			return fmt.Errorf("lock run and action: %w", err)
		}
		now := time.Now().UTC()
		n, err := tx.Tasks().MarkTasksUnschedulable(ctx, key, now)
		if err != nil {
			return fmt.Errorf("mark tasks unschedulable: %w", err)
		}
		if n == 0 {
			return nil
		}
		ev.Done, ev.Run = true, key.RunKey
		if err := s.deriveAction(ctx, tx, &ev, act, true, false, false, now); err != nil || !ev.ActionPhase.IsTerminal() {
			return err
		}
		if err := s.finalizeCache(ctx, tx, &ev, act, ev.ActionPhase, now); err != nil {
			return err
		}
		adv, err := s.progress(ctx, tx, run, now)
		ev.Advance = &adv
		if err != nil {
			return fmt.Errorf("advance run: %w", err)
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return false, nil // the run is gone
	}
	if err != nil {
		return ev.Done, fmt.Errorf("expire deadline of %s: %w", key, err)
	}
	if ev.Done {
		s.afterEvaluation(ctx, ev)
	}
	return ev.Done, nil
}

// expireTimeouts aborts, with cause timeout, each action with a task running
// past its attempt_timeout, each step past its timeout (from its first
// start, retries included: KubeVela's step timeout) and each run past its
// timeout: their tasks are KILLED through the abort path, so the processes
// die and the job (or the run) is TIMED_OUT; then the run advances. It
// returns how many it aborted.
func (s *Scheduler) expireTimeouts(ctx context.Context, due store.Due) (int, error) {
	n := 0
	for _, to := range due.AttemptTimeouts {
		reason := fmt.Sprintf("task %d exceeded its attempt timeout of %s", to.TaskIdx, to.Timeout)
		ok, err := s.timeOut(ctx, to.Action, reason)
		if err != nil {
			return n, err
		}
		n += ok
	}
	for _, to := range due.Timeouts {
		what := "step " + to.Action.Action
		if to.Action.Action == domain.RootActionName {
			what = "run"
		}
		ok, err := s.timeOut(ctx, to.Action, fmt.Sprintf("the %s exceeded its timeout of %s", what, to.Timeout))
		if err != nil {
			return n, err
		}
		n += ok
	}
	return n, nil
}

// timeOut aborts an action with cause timeout and advances its run; it
// returns 1 when it aborted it, 0 when it had ended already.
func (s *Scheduler) timeOut(ctx context.Context, key domain.ActionKey, reason string) (int, error) {
	_, err := s.store.Aborts().AbortAction(ctx, key, reason, domain.CauseTimeout)
	if errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("abort %s on timeout: %w", key, err)
	}
	s.metrics.timedOut.Inc()
	s.enqueueAbort(ctx, key)
	if _, err := s.advance(ctx, key.RunKey); err != nil {
		s.log.Warn("advance after timeout failed", "action", key.String(), "err", err)
	}
	return 1, nil
}
