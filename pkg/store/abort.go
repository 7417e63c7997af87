package store

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Abort outcomes recorded in actions.abort_outcome.
const (
	AbortDelivered         = "delivered"
	AbortNeedsIntervention = "needs_intervention"
)

// liveStates are attempt states that may hold a process: BUILDING, RUNNING,
// ASSIGNED.
var liveStates = []int16{int16(domain.TaskBuilding), int16(domain.TaskRunning), int16(domain.TaskAssigned)}

// subtreeSQL selects the names of an action and all its descendants; its
// parameters are project, domain, run, action, project, domain, run.
const subtreeSQL = `WITH RECURSIVE sub(name) AS (
	SELECT name FROM actions WHERE project = ? AND domain = ? AND run_name = ? AND name = ?
	UNION
	SELECT a.name FROM actions a JOIN sub ON a.parent_action_name = sub.name
	WHERE a.project = ? AND a.domain = ? AND a.run_name = ?)
SELECT name FROM sub`

func subtreeArgs(k domain.ActionKey) []any {
	return []any{k.Project, k.Domain, k.Run, k.Action, k.Project, k.Domain, k.Run}
}

// AbortAction records an abort in one transaction (Flyte's AbortRun /
// AbortAction, seeds/000 "Initiation and Persistence"): the action and every
// non-terminal descendant become ABORTED, their unfinished tasks KILLED, and
// the action gets abort_requested_at, abort_reason and abort_attempt_count 0.
// The caller then pushes the abort. Errors: ErrNotFound, ErrTerminal.
func (s *Store) AbortAction(ctx context.Context, key domain.ActionKey, reason string) (Action, error) {
	var a Action
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).
			Where("project = ? AND domain = ? AND run_name = ? AND name = ?", key.Project, key.Domain, key.Run, key.Action).
			Take(&a).Error; err != nil {
			return mapErr(err)
		}
		if domain.Phase(a.Phase).IsTerminal() {
			return ErrTerminal
		}
		now := time.Now().UTC()
		sub := tx.q(ctx).Raw(subtreeSQL, subtreeArgs(key)...)
		if err := tx.q(ctx).Model(&Action{}).
			Where("project = ? AND domain = ? AND run_name = ? AND name IN (?) AND phase NOT IN ?",
				key.Project, key.Domain, key.Run, sub, terminalPhases()).
			Updates(map[string]any{"phase": string(domain.PhaseAborted), "ended_at": now, "updated_at": now,
				"version": gorm.Expr("version + 1")}).Error; err != nil {
			return mapErr(err)
		}
		if err := tx.q(ctx).Model(&Task{}).
			Where("project = ? AND domain = ? AND run_name = ? AND action_name IN (?) AND state IN ?",
				key.Project, key.Domain, key.Run, sub, []int16{int16(domain.TaskPending), int16(domain.TaskAssigned),
					int16(domain.TaskBuilding), int16(domain.TaskRunning)}).
			Updates(map[string]any{"state": int16(domain.TaskKilled), "ended_at": now, "updated_at": now,
				"version": gorm.Expr("version + 1")}).Error; err != nil {
			return mapErr(err)
		}
		a.AbortRequestedAt, a.AbortReason, a.AbortAttemptCount, a.AbortOutcome = &now, &reason, 0, nil
		a.Phase, a.EndedAt = string(domain.PhaseAborted), &now
		if err := tx.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND name = ?",
			key.Project, key.Domain, key.Run, key.Action).
			Updates(map[string]any{"abort_requested_at": now, "abort_reason": reason,
				"abort_attempt_count": 0, "abort_outcome": nil}).Error; err != nil {
			return mapErr(err)
		}
		if key.Action == domain.RootActionName {
			if err := tx.setRunPhase(ctx, key.RunKey, domain.PhaseAborted, now); err != nil {
				return err
			}
		}
		return tx.event(ctx, key.RunKey, key.Action, "action.abort_requested", map[string]any{"reason": reason})
	})
	return a, err
}

func terminalPhases() []string {
	return []string{string(domain.PhaseSucceeded), string(domain.PhaseFailed), string(domain.PhaseAborted),
		string(domain.PhaseTimedOut), string(domain.PhaseUnschedulable), string(domain.PhaseWorkerFailed),
		string(domain.PhaseSkipped)}
}

// MarkAbortAttempt increments the action's abort_attempt_count before a
// delivery and returns the new count (Flyte's MarkAbortAttempt: a crash keeps
// the count). Errors: ErrNotFound when no abort is pending for key.
func (s *Store) MarkAbortAttempt(ctx context.Context, key domain.ActionKey) (int, error) {
	var count []int
	err := s.q(ctx).Raw(`UPDATE actions SET abort_attempt_count = abort_attempt_count + 1, updated_at = now()
		WHERE project = ? AND domain = ? AND run_name = ? AND name = ? AND abort_requested_at IS NOT NULL
		RETURNING abort_attempt_count`, key.Project, key.Domain, key.Run, key.Action).Scan(&count).Error
	if err != nil {
		return 0, mapErr(err)
	}
	if len(count) == 0 {
		return 0, ErrNotFound
	}
	return count[0], nil
}

// ClearAbortRequest ends a pending abort with outcome (AbortDelivered or
// AbortNeedsIntervention) and writes an event.
func (s *Store) ClearAbortRequest(ctx context.Context, key domain.ActionKey, outcome string) error {
	return s.InTx(ctx, func(tx *Store) error {
		res := tx.q(ctx).Model(&Action{}).
			Where("project = ? AND domain = ? AND run_name = ? AND name = ? AND abort_requested_at IS NOT NULL",
				key.Project, key.Domain, key.Run, key.Action).
			Updates(map[string]any{"abort_requested_at": nil, "abort_outcome": outcome, "updated_at": time.Now().UTC(),
				"version": gorm.Expr("version + 1")})
		if res.Error != nil || res.RowsAffected == 0 {
			return mapErr(res.Error)
		}
		return tx.event(ctx, key.RunKey, key.Action, "action.abort_"+outcome, nil)
	})
}

// ListPendingAborts returns every action with abort_requested_at set (Flyte's
// startup scan, seeds/000 "Startup Scan"), oldest first.
func (s *Store) ListPendingAborts(ctx context.Context) ([]domain.ActionKey, error) {
	var rows []Action
	if err := s.q(ctx).Select("project, domain, run_name, name").Where("abort_requested_at IS NOT NULL").
		Order("abort_requested_at").Find(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	keys := make([]domain.ActionKey, len(rows))
	for i, r := range rows {
		keys[i] = domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.RunName}.Action(r.Name)
	}
	return keys, nil
}

// LiveAttempt is an attempt that may hold a process, and where it runs.
type LiveAttempt struct {
	ID       int64
	WorkerID *string
	// Address is the executor's base URL; nil when the worker row is gone.
	Address         *string
	WorkerState     *string
	LastHeartbeatAt *time.Time
}

// LiveAttemptsUnder returns the live attempts (ASSIGNED, BUILDING, RUNNING)
// of every task of the action and its descendants.
func (s *Store) LiveAttemptsUnder(ctx context.Context, key domain.ActionKey) ([]LiveAttempt, error) {
	var out []LiveAttempt
	args := append([]any{}, subtreeArgs(key)...)
	args = append(args, key.Project, key.Domain, key.Run, liveStates)
	err := s.q(ctx).Raw(`SELECT at.id, at.worker_id, w.address, w.state AS worker_state, w.last_heartbeat_at
		FROM attempts at JOIN tasks t ON t.id = at.task_id LEFT JOIN workers w ON w.id = at.worker_id
		WHERE t.action_name IN (`+subtreeSQL+`) AND t.project = ? AND t.domain = ? AND t.run_name = ?
		AND at.state IN ? ORDER BY at.id`, args...).Scan(&out).Error
	return out, mapErr(err)
}

// MarkAttemptsGone records that live attempts no longer run anywhere (their
// executor reported them unknown, or their worker is gone): they become
// KILLED with cause, and need no evaluation since an abort killed their task.
func (s *Store) MarkAttemptsGone(ctx context.Context, ids []int64, cause string) error {
	if len(ids) == 0 {
		return nil
	}
	now := time.Now().UTC()
	return mapErr(s.q(ctx).Model(&Attempt{}).Where("id IN ? AND state IN ?", ids, liveStates).
		Updates(map[string]any{"state": int16(domain.TaskKilled), "cause": cause, "finished_at": now,
			"evaluated_at": now, "updated_at": now}).Error)
}

// setRunPhase sets the run row's phase (mirroring a0's); a terminal phase also
// sets ended_at.
func (s *Store) setRunPhase(ctx context.Context, key domain.RunKey, p domain.Phase, now time.Time) error {
	up := map[string]any{"phase": string(p), "updated_at": now, "version": gorm.Expr("version + 1")}
	if p.IsTerminal() {
		up["ended_at"] = now
	}
	return mapErr(s.q(ctx).Model(&Run{}).Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Run).
		Updates(up).Error)
}
