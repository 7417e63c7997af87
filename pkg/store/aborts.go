package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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

// Causes, as domain names them; see there.
const (
	CauseAborted    = domain.CauseAborted
	CauseTimeout    = domain.CauseTimeout
	CausePreempted  = domain.CausePreempted
	CauseWorkerLost = domain.CauseWorkerLost
)

// AbortAction records an abort in one transaction (Flyte's AbortRun /
// AbortAction: the database change is what the reconciler drives to
// completion): the action and every non-terminal descendant end in the
// phase domain.AbortPhase gives for cause (ABORTED, or TIMED_OUT for a
// timeout), their unfinished tasks KILLED, and the action gets
// abort_requested_at, abort_reason, abort_cause, abort_attempt_count 0 and an
// "action.abort_requested" event. cause "" means CauseAborted. The caller
// then pushes queue.NewActionAbortTask; the reconciler's scan heals a lost
// push. Errors: ErrNotFound, ErrTerminal, domain.ErrBadCause.
func (s Aborts) AbortAction(ctx context.Context, key domain.ActionKey, reason, cause string) (Action, error) {
	phase, cause, err := domain.AbortPhase(cause)
	if err != nil {
		return Action{}, err
	}
	var a Action
	err = s.inTx(ctx, func(tx *Store) error {
		if err := tx.lockForAbort(ctx, key); err != nil {
			return err
		}
		if err := tx.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).
			Where("project = ? AND domain = ? AND run_name = ? AND name = ?", key.Project, key.Domain, key.Run, key.Action).
			Take(&a).Error; err != nil {
			return mapErr(err)
		}
		if domain.Phase(a.Phase).IsTerminal() {
			return ErrTerminal
		}
		now := time.Now().UTC()
		if err := tx.endSubtree(ctx, key, phase, now); err != nil {
			return err
		}
		a.AbortRequestedAt, a.AbortReason, a.AbortCause, a.AbortAttemptCount, a.AbortOutcome = &now, &reason, &cause, 0, nil
		a.Phase, a.EndedAt = string(phase), &now
		if err := tx.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND name = ?",
			key.Project, key.Domain, key.Run, key.Action).
			Updates(map[string]any{"abort_requested_at": now, "abort_reason": reason, "abort_cause": cause,
				"abort_attempt_count": 0, "abort_outcome": nil}).Error; err != nil {
			return mapErr(err)
		}
		if key.Action == domain.RootActionName {
			if err := tx.runs().SetRunPhase(ctx, key.RunKey, phase, now); err != nil {
				return err
			}
		}
		return tx.event(ctx, key.RunKey, key.Action, "action.abort_requested",
			map[string]any{"reason": reason, "cause": cause})
	})
	return a, err
}

// lockForAbort takes AbortAction's row locks in the lock order: the run,
// then the subtree's actions by name, then their unfinished tasks by id.
// Errors: ErrNotFound (no such run).
func (s *core) lockForAbort(ctx context.Context, key domain.ActionKey) error {
	var runs []string
	if err := s.raw(ctx, `SELECT name FROM runs WHERE project = ? AND domain = ? AND name = ? FOR UPDATE`,
		key.Project, key.Domain, key.Run).Scan(&runs).Error; err != nil {
		return mapErr(err)
	}
	if len(runs) == 0 {
		return ErrNotFound
	}
	var names []string
	if err := s.raw(ctx, `SELECT name FROM actions WHERE project = ? AND domain = ? AND run_name = ?
		AND name IN (`+subtreeSQL+`) ORDER BY name FOR UPDATE`,
		append([]any{key.Project, key.Domain, key.Run}, subtreeArgs(key)...)...).Scan(&names).Error; err != nil {
		return mapErr(err)
	}
	var ids []int64
	return mapErr(s.raw(ctx, `SELECT id FROM tasks WHERE project = ? AND domain = ? AND run_name = ?
		AND action_name IN (`+subtreeSQL+`) AND state IN `+sqlUnfinished+` ORDER BY id FOR UPDATE`,
		append([]any{key.Project, key.Domain, key.Run}, subtreeArgs(key)...)...).Scan(&ids).Error)
}

// endSubtree moves the action under key and every non-terminal descendant to
// phase, and their unfinished tasks to KILLED.
func (s *core) endSubtree(ctx context.Context, key domain.ActionKey, phase domain.Phase, now time.Time) error {
	sub := s.raw(ctx, subtreeSQL, subtreeArgs(key)...)
	if err := s.q(ctx).Model(&Action{}).
		Where("project = ? AND domain = ? AND run_name = ? AND name IN (?) AND phase NOT IN ?",
			key.Project, key.Domain, key.Run, sub, domain.TerminalPhases()).
		Updates(map[string]any{"phase": string(phase), "ended_at": now, "updated_at": now,
			"version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	return mapErr(s.q(ctx).Model(&Task{}).
		Where("project = ? AND domain = ? AND run_name = ? AND action_name IN (?) AND state IN "+sqlUnfinished,
			key.Project, key.Domain, key.Run, sub).
		Updates(map[string]any{"state": domain.TaskKilled, "ended_at": now, "updated_at": now,
			"version": gorm.Expr("version + 1")}).Error)
}

// MarkAbortAttempt increments the action's abort_attempt_count before a
// delivery and returns the new count (Flyte's MarkAbortAttempt: a crash keeps
// the count). Errors: ErrNotFound when no abort is pending for key.
func (s Aborts) MarkAbortAttempt(ctx context.Context, key domain.ActionKey) (int, error) {
	var count []int
	err := s.raw(ctx, `UPDATE actions SET abort_attempt_count = abort_attempt_count + 1, updated_at = now()
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
func (s Aborts) ClearAbortRequest(ctx context.Context, key domain.ActionKey, outcome string) error {
	return s.inTx(ctx, func(tx *Store) error {
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
// startup scan), oldest first.
func (s Aborts) ListPendingAborts(ctx context.Context) ([]domain.ActionKey, error) {
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
	// CredentialSHA256 is the worker's stored credential digest
	// (Worker.CredentialSHA256); nil when it has none or its row is gone.
	CredentialSHA256 []byte `gorm:"column:credential_sha256"`
}

// LiveAttemptsUnder returns the live attempts (ASSIGNED, BUILDING, RUNNING)
// of the ended tasks of the action and its descendants: what an abort, which
// ends their tasks, must still stop. A task still unfinished — a step's next
// generation, started while an abort of the last one is delivered — is not
// the abort's.
func (s Aborts) LiveAttemptsUnder(ctx context.Context, key domain.ActionKey) ([]LiveAttempt, error) {
	var out []LiveAttempt
	args := append([]any{}, subtreeArgs(key)...)
	args = append(args, key.Project, key.Domain, key.Run)
	err := s.raw(ctx, `SELECT at.id, at.worker_id, w.address, w.state AS worker_state, w.last_heartbeat_at,
		w.credential_sha256 FROM attempts at JOIN tasks t ON t.id = at.task_id LEFT JOIN workers w ON w.id = at.worker_id
		WHERE t.action_name IN (`+subtreeSQL+`) AND t.project = ? AND t.domain = ? AND t.run_name = ?
		AND at.state IN `+sqlLive+` AND t.state NOT IN `+sqlUnfinished+` ORDER BY at.id`, args...).Scan(&out).Error
	return out, mapErr(err)
}

// MarkAttemptsGone records that live attempts no longer run anywhere (their
// executor reported them unknown, or their worker is gone): they become
// KILLED with cause. It returns those that are the current attempt of a
// task an abort KILLED: left unevaluated, the caller enqueues their
// evaluation, which completes the abort (the action's ABORTED event); the
// others need none.
func (s Aborts) MarkAttemptsGone(ctx context.Context, ids []int64, cause string) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	now := time.Now().UTC()
	var rows []struct {
		ID   int64
		Last bool
	}
	err := s.raw(ctx, `WITH l AS (SELECT at.id, t.state = ? AND t.attempt_count = at.number AS last
			FROM attempts at JOIN tasks t ON t.id = at.task_id
			WHERE at.id IN ? AND at.state IN `+sqlLive+` ORDER BY at.id FOR UPDATE OF at)
		UPDATE attempts SET state = ?, cause = ?, finished_at = ?, updated_at = ?,
			evaluated_at = CASE WHEN l.last THEN NULL ELSE CAST(? AS timestamptz) END
		FROM l WHERE attempts.id = l.id RETURNING attempts.id, l.last`,
		domain.TaskKilled, ids, domain.TaskKilled, cause, now, now, now).Scan(&rows).Error
	var evaluate []int64
	for _, r := range rows {
		if r.Last {
			evaluate = append(evaluate, r.ID)
		}
	}
	slices.Sort(evaluate)
	return evaluate, mapErr(err)
}

// Abort states, the filter of ListAborts.
const (
	// AbortStatePending: requested, being delivered.
	AbortStatePending = "pending"
	// AbortStateDelivered: cleared with outcome AbortDelivered.
	AbortStateDelivered = AbortDelivered
	// AbortStateNeedsIntervention: cleared with outcome
	// AbortNeedsIntervention after MaxAttempts failed rounds.
	AbortStateNeedsIntervention = AbortNeedsIntervention
)

// AbortRecord is one abort of an action, or one kill of an attempt.
type AbortRecord struct {
	// Kind is "action" or "attempt".
	Kind       string
	Project    string
	Domain     string
	RunName    string
	ActionName string
	// AttemptID is set for an attempt kill.
	AttemptID *int64
	// Cause is aborted, timeout, preempted or worker_lost.
	Cause string
	// Reason is an action abort's reason (nil for attempt kills).
	Reason *string
	// RequestedAt is set while the abort is pending.
	RequestedAt *time.Time
	// AttemptCount is how many delivery rounds were counted.
	AttemptCount int
	// Outcome is set once cleared: AbortDelivered or AbortNeedsIntervention.
	Outcome   *string
	UpdatedAt time.Time
	// SortKey orders records updated at the same time (and makes cursors).
	SortKey string
}

// AbortFilter selects ListAborts' records.
type AbortFilter struct {
	// State is AbortStatePending, AbortStateDelivered,
	// AbortStateNeedsIntervention, or "" for every abort ever requested.
	State string
	// Cursor is the NextCursor of the previous page.
	Cursor string
	// Limit is the page size, 1 to 500. Default 50.
	Limit int
	// Projects, when not empty, keeps only the aborts of these projects
	// (a project-scoped token's view).
	Projects []string
	// Project and Domain, when set, keep only the aborts of that project
	// and of that domain (each on its own, and with Projects).
	Project, Domain string
}

// abortsSQL lists action aborts and attempt kills with common columns; the
// two %s are each part's WHERE condition.
const abortsSQL = `SELECT * FROM (
	SELECT 'action' AS kind, project, domain, run_name, name AS action_name, NULL::bigint AS attempt_id,
		COALESCE(abort_cause, 'aborted') AS cause, abort_reason AS reason, abort_requested_at AS requested_at,
		abort_attempt_count AS attempt_count, abort_outcome AS outcome, updated_at,
		'action:' || project || '/' || domain || '/' || run_name || '/' || name AS sort_key
	FROM actions WHERE %[1]s
	UNION ALL
	SELECT 'attempt', t.project, t.domain, t.run_name, t.action_name, at.id,
		COALESCE(at.kill_cause, 'aborted'), NULL, at.kill_requested_at,
		at.kill_attempt_count, at.kill_outcome, at.updated_at, 'attempt:' || lpad(at.id::text, 19, '0')
	FROM attempts at JOIN tasks t ON t.id = at.task_id WHERE %[2]s) x`

// ListAborts returns a page of action aborts and attempt kills in state,
// most recently updated first, and the cursor of the next page ("" on the
// last): what an operator looks at, e.g. the aborts that need manual
// intervention. Errors: ErrBadCursor.
func (s Aborts) ListAborts(ctx context.Context, f AbortFilter) ([]AbortRecord, string, error) {
	limit := min(max(cmp.Or(f.Limit, 50), 1), 500)
	var actionCond, attemptCond string
	args := []any{}
	switch f.State {
	case AbortStatePending:
		actionCond, attemptCond = "abort_requested_at IS NOT NULL", "at.kill_requested_at IS NOT NULL"
	case AbortStateDelivered, AbortStateNeedsIntervention:
		actionCond, attemptCond = "abort_requested_at IS NULL AND abort_outcome = ?",
			"at.kill_requested_at IS NULL AND at.kill_outcome = ?"
		args = append(args, f.State, f.State)
	case "":
		actionCond = "(abort_requested_at IS NOT NULL OR abort_outcome IS NOT NULL)"
		attemptCond = "(at.kill_requested_at IS NOT NULL OR at.kill_outcome IS NOT NULL)"
	default:
		return nil, "", fmt.Errorf("unknown abort state %q", f.State)
	}
	q := fmt.Sprintf(abortsSQL, actionCond, attemptCond) + " WHERE TRUE"
	if len(f.Projects) > 0 {
		q += " AND project = ANY(?)"
		args = append(args, Strings(f.Projects))
	}
	if f.Project != "" {
		q += " AND project = ?"
		args = append(args, f.Project)
	}
	if f.Domain != "" {
		q += " AND domain = ?"
		args = append(args, f.Domain)
	}
	if f.Cursor != "" {
		at, key, err := decodeCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		q += " AND (updated_at, sort_key) < (?, ?)"
		args = append(args, at, key)
	}
	var out []AbortRecord
	if err := s.raw(ctx, q+" ORDER BY updated_at DESC, sort_key DESC LIMIT ?", append(args, limit+1)...).
		Scan(&out).Error; err != nil {
		return nil, "", mapErr(err)
	}
	if len(out) <= limit {
		return out, "", nil
	}
	last := out[limit-1]
	return out[:limit], encodeCursor(last.UpdatedAt, last.SortKey), nil
}
