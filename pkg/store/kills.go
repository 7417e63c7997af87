package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm/clause"
)

// Attempt kills: an attempt-level abort (preemption, an attempt's timeout),
// delivered by the abort reconciler exactly like an action's abort: a task
// timeout and a preemption take the same path as a user's abort. The request lives
// in the attempt's kill_* columns; the queue task is queue.NewAttemptKillTask.

// RequestAttemptKill records that live attempt attemptID must be killed with
// cause (CausePreempted, CauseTimeout, CauseWorkerLost or CauseAborted): it
// sets kill_requested_at, kill_cause, kill_attempt_count 0, clears
// kill_outcome and writes an "attempt.kill_requested" event. It changes
// neither the attempt's nor its task's state: the executor's report (or the
// reconciler, when the attempt is already gone) ends the attempt with cause.
// A kill already pending is left as it is (nil). Call it on the tx Store of
// InTx to request the kill with the decision that needs it; after the commit,
// enqueue queue.NewAttemptKillTask (the reconciler's scan heals a lost push).
// Errors: ErrBadCause, ErrNotFound, ErrTerminal (the attempt already ended:
// nothing to kill).
func (s Aborts) RequestAttemptKill(ctx context.Context, attemptID int64, cause string) error {
	if !slices.Contains(domain.KillCauses, cause) {
		return fmt.Errorf("%w: %q (want one of %v)", domain.ErrBadCause, cause, domain.KillCauses)
	}
	// Inside the caller's transaction, InTx is a savepoint.
	return s.inTx(ctx, func(tx *Store) error {
		var a Attempt
		if err := tx.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Take(&a, attemptID).Error; err != nil {
			return mapErr(err)
		}
		if !a.State.IsLive() {
			return ErrTerminal
		}
		if a.KillRequestedAt != nil {
			return nil // pending: the first request's cause and count stand
		}
		now := time.Now().UTC()
		if err := tx.q(ctx).Model(&Attempt{}).Where("id = ?", attemptID).Updates(map[string]any{
			"kill_requested_at": now, "kill_cause": cause, "kill_attempt_count": 0, "kill_outcome": nil,
			"updated_at": now}).Error; err != nil {
			return mapErr(err)
		}
		return tx.attemptEvent(ctx, a, "attempt.kill_requested", map[string]any{"cause": cause})
	})
}

// MarkKillAttempt increments the attempt's kill_attempt_count before a
// delivery round and returns the new count (a crash keeps it). Errors:
// ErrNotFound when no kill of attemptID is pending.
func (s Aborts) MarkKillAttempt(ctx context.Context, attemptID int64) (int, error) {
	var count []int
	err := s.raw(ctx, `UPDATE attempts SET kill_attempt_count = kill_attempt_count + 1, updated_at = now()
		WHERE id = ? AND kill_requested_at IS NOT NULL RETURNING kill_attempt_count`, attemptID).Scan(&count).Error
	if err != nil {
		return 0, mapErr(err)
	}
	if len(count) == 0 {
		return 0, ErrNotFound
	}
	return count[0], nil
}

// KillTarget is a pending kill and where its attempt runs.
type KillTarget struct {
	LiveAttempt
	// Live is false when the attempt already ended: nothing is left to kill.
	Live bool
	// Cause is the kill's cause; RequestedAt its kill_requested_at (nil when
	// no kill is pending any more).
	Cause       string
	RequestedAt *time.Time
}

// GetKillTarget reads attempt attemptID's kill request, whether it is still
// live, and its worker. Errors: ErrNotFound.
func (s Aborts) GetKillTarget(ctx context.Context, attemptID int64) (KillTarget, error) {
	var rows []struct {
		LiveAttempt
		State           domain.TaskState
		KillCause       *string
		KillRequestedAt *time.Time
	}
	err := s.raw(ctx, `SELECT at.id, at.worker_id, at.state, at.kill_cause, at.kill_requested_at, w.address,
		w.state AS worker_state, w.last_heartbeat_at, w.credential_sha256
		FROM attempts at LEFT JOIN workers w ON w.id = at.worker_id WHERE at.id = ?`, attemptID).Scan(&rows).Error
	if err != nil {
		return KillTarget{}, mapErr(err)
	}
	if len(rows) == 0 {
		return KillTarget{}, ErrNotFound
	}
	r := rows[0]
	kt := KillTarget{LiveAttempt: r.LiveAttempt, Live: r.State.IsLive(), RequestedAt: r.KillRequestedAt,
		Cause: CauseAborted}
	if r.KillCause != nil {
		kt.Cause = *r.KillCause
	}
	return kt, nil
}

// MarkKillGone records that a live attempt whose kill was requested no
// longer runs anywhere (its executor answered not found, or its worker is
// gone): it ends in the state its cause implies (PREEMPTED for
// CausePreempted, WORKER_FAILED for CauseWorkerLost, else KILLED) with cause.
// When the attempt is still its task's current live attempt, the scheduler
// must decide the task's fate: evaluate is true, and the caller enqueues
// queue.NewTaskEvaluateTask. An attempt that already ended is left alone.
func (s Aborts) MarkKillGone(ctx context.Context, attemptID int64, cause string) (evaluate bool, err error) {
	err = s.inTx(ctx, func(tx *Store) error {
		var rows []struct{ Current bool }
		if err := tx.raw(ctx, `SELECT t.state IN `+sqlLive+` AND t.attempt_count = at.number AS current
			FROM attempts at JOIN tasks t ON t.id = at.task_id WHERE at.id = ? AND at.state IN `+sqlLive+` FOR UPDATE OF at`,
			attemptID).Scan(&rows).Error; err != nil {
			return mapErr(err)
		}
		if len(rows) == 0 {
			return nil
		}
		now := time.Now().UTC()
		up := map[string]any{"state": domain.GoneState(cause), "cause": cause, "finished_at": now, "updated_at": now}
		if !rows[0].Current {
			up["evaluated_at"] = now
		}
		evaluate = rows[0].Current
		if err := tx.q(ctx).Model(&Attempt{}).Where("id = ?", attemptID).Updates(up).Error; err != nil {
			return mapErr(err)
		}
		var a Attempt
		if err := tx.q(ctx).Take(&a, attemptID).Error; err != nil {
			return mapErr(err)
		}
		return tx.attemptEvent(ctx, a, "attempt."+domain.GoneState(cause).String(),
			map[string]any{"cause": cause, "error": "already gone when the kill was delivered"})
	})
	return evaluate, err
}

// ClearKillRequest ends attemptID's pending kill with outcome (AbortDelivered
// or AbortNeedsIntervention) and writes an "attempt.kill_<outcome>" event. A
// kill no longer pending is left alone.
func (s Aborts) ClearKillRequest(ctx context.Context, attemptID int64, outcome string) error {
	return s.inTx(ctx, func(tx *Store) error {
		res := tx.q(ctx).Model(&Attempt{}).Where("id = ? AND kill_requested_at IS NOT NULL", attemptID).
			Updates(map[string]any{"kill_requested_at": nil, "kill_outcome": outcome, "updated_at": time.Now().UTC()})
		if res.Error != nil || res.RowsAffected == 0 {
			return mapErr(res.Error)
		}
		var a Attempt
		if err := tx.q(ctx).Take(&a, attemptID).Error; err != nil {
			return mapErr(err)
		}
		return tx.attemptEvent(ctx, a, "attempt.kill_"+outcome, nil)
	})
}

// ListPendingKills returns the id of every attempt with kill_requested_at
// set, oldest request first (the reconciler's startup and periodic scan).
func (s Aborts) ListPendingKills(ctx context.Context) ([]int64, error) {
	var ids []int64
	err := s.q(ctx).Model(&Attempt{}).Where("kill_requested_at IS NOT NULL").Order("kill_requested_at, id").
		Pluck("id", &ids).Error
	return ids, mapErr(err)
}

// attemptEvent writes a run event about attempt a.
func (s *core) attemptEvent(ctx context.Context, a Attempt, typ string, data any) error {
	var t Task
	if err := s.q(ctx).Take(&t, a.TaskID).Error; err != nil {
		return mapErr(err)
	}
	return s.taskEvent(ctx, t, a.ID, typ, data)
}
