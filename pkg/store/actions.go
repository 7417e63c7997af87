package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
)

// StepActions returns a run's step actions (every action but the root a0),
// by name, read as the JSON Postgres builds from the rows.
func (s Actions) StepActions(ctx context.Context, key domain.RunKey) ([]Action, error) {
	var raw []byte
	err := scanRow(s.raw(ctx, `SELECT coalesce(json_agg(a ORDER BY a.name), '[]') FROM actions a
		WHERE project = ? AND domain = ? AND run_name = ? AND name <> ?`, key.Project, key.Domain, key.Run,
		domain.RootActionName), &raw)

	if err != nil {
		return nil, mapErr(err)
	}
	var steps []Action
	if err := decodeRows(raw, &steps); err != nil {
		return nil, fmt.Errorf("decode step actions: %w", err)
	}
	return steps, nil
}

// StepActionsOfRuns returns the step actions of several runs, as
// StepActions does for one, in one statement: by run key, each run's by
// name. A run without step actions is missing from the map. keys may
// repeat.
func (s Actions) StepActionsOfRuns(ctx context.Context, keys []domain.RunKey) (map[domain.RunKey][]Action, error) {
	projects, domains, names := runKeyArrays(keys)
	var raw []byte
	err := scanRow(s.raw(ctx, `SELECT coalesce(json_agg(a ORDER BY a.project, a.domain, a.run_name, a.name), '[]')
		FROM actions a WHERE (a.project, a.domain, a.run_name) IN
			(SELECT * FROM unnest(CAST(CAST(? AS text) AS text[]), CAST(CAST(? AS text) AS text[]),
				CAST(CAST(? AS text) AS text[])))
		AND a.name <> ?`, projects, domains, names, domain.RootActionName), &raw)

	if err != nil {
		return nil, mapErr(err)
	}
	var steps []Action
	if err := decodeRows(raw, &steps); err != nil {
		return nil, fmt.Errorf("decode step actions: %w", err)
	}
	out := map[domain.RunKey][]Action{}
	for _, a := range steps {
		k := domain.RunKey{Project: a.Project, Domain: a.Domain, Run: a.RunName}
		out[k] = append(out[k], a)
	}
	return out, nil
}

// actionColumns lists the columns of actions (columnsOf).
var actionColumns = columnsOf[Action]()

// insertActionsSQL inserts the actions of a JSON array of Action.
var insertActionsSQL = `INSERT INTO actions (` + actionColumns + `) SELECT ` + actionColumns + `
	FROM jsonb_populate_recordset(NULL::actions, CAST(? AS jsonb))`

// SetActionPhase moves an action from phase from to phase to (a terminal
// phase also sets ended_at) and writes an "action.phase" event. It changes
// nothing and returns false when the action is no longer in phase from.
func (s Actions) SetActionPhase(ctx context.Context, key domain.ActionKey, from, to domain.Phase, now time.Time) (bool, error) {
	up := map[string]any{"phase": string(to), "updated_at": now, "version": gorm.Expr("version + 1")}
	if to.IsTerminal() {
		up["ended_at"] = now
	}
	res := s.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND name = ? AND phase = ?",
		key.Project, key.Domain, key.Run, key.Action, string(from)).Updates(up)
	if res.Error != nil || res.RowsAffected == 0 {
		return false, mapErr(res.Error)
	}
	return true, s.event(ctx, key.RunKey, key.Action, "action.phase", map[string]any{"from": from, "to": to})
}

// LockRunAction locks a run's row, then one of its actions' (the lock
// order's first two levels), in one statement, and returns both. Errors:
// ErrNotFound.
func (s Actions) LockRunAction(ctx context.Context, key domain.ActionKey) (Run, Action, error) {
	var run Run
	var act Action
	err := scanRows(s.raw(ctx, `SELECT row_to_json(r), row_to_json(a) FROM runs r
		JOIN actions a ON (a.project, a.domain, a.run_name) = (r.project, r.domain, r.name)
		WHERE r.project = ? AND r.domain = ? AND r.name = ? AND a.name = ? FOR UPDATE OF r, a`,
		key.Project, key.Domain, key.Run, key.Action), &run, &act)
	return run, act, err
}

// LockTaskActions locks, in key order, the actions of the given tasks: what
// a transaction that then locks tasks of several actions takes first (the
// lock order). With phases, it locks only the actions in one of them (as
// locked: one that left them meanwhile is passed over), and waits for no
// other action's holder.
func (s Actions) LockTaskActions(ctx context.Context, taskIDs []int64, phases ...domain.Phase) error {
	var n []int
	in := Strings{}
	for _, p := range phases {
		in = append(in, string(p))
	}
	return mapErr(s.raw(ctx, `SELECT 1 FROM actions a WHERE (a.project, a.domain, a.run_name, a.name) IN
		(SELECT project, domain, run_name, action_name FROM tasks WHERE id IN ?)
		AND (cardinality(CAST(? AS text[])) = 0 OR a.phase = ANY(CAST(? AS text[])))
		ORDER BY a.project, a.domain, a.run_name, a.name FOR NO KEY UPDATE OF a`, taskIDs, in, in).Scan(&n).Error)
}

// RequestActionAbort records that the live attempts under an action must be
// stopped (abort_requested_at, abort_reason, abort_attempt_count 0), without
// changing its phase, and writes an "action.survivors_killed" event with
// data. The caller then pushes the abort task.
func (s Actions) RequestActionAbort(ctx context.Context, key domain.ActionKey, reason string, data map[string]any) error {
	if err := s.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND name = ?",
		key.Project, key.Domain, key.Run, key.Action).
		Updates(map[string]any{"abort_requested_at": time.Now().UTC(), "abort_reason": reason,
			"abort_attempt_count": 0, "abort_outcome": nil}).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.survivors_killed", data)
}

// Decider is who decides an approval: the token the api authenticated
// the call with (TokenID, TokenName; "" when there was none) and the label
// the caller gave (Label, its by; "" for none), which nothing checks.
type Decider struct {
	TokenID, TokenName, Label string
}

// RecordApproval records the decision (domain.DecisionApproved or
// domain.DecisionRejected) on approval step act, as its caller locked it
// (LockRunAction), with who made it (decided_by_token_id and _name from
// who's token, decided_by from its label), when (now) and comment (""
// for none), writes an "action.approved" or "action.rejected" event
// ({by, token_id, token_name, comment}), and returns act as written. It
// changes no phase: the scheduler, advancing the run, ends the step
// (domain.ApprovalOutcome).
func (s Actions) RecordApproval(ctx context.Context, act Action, decision string, who Decider, comment string) (Action, error) {
	now := dbNow()
	act.Decision, act.DecidedBy, act.DecidedAt, act.DecisionComment = &decision, strPtr(who.Label), &now, strPtr(comment)
	act.DecidedByTokenID, act.DecidedByTokenName = strPtr(who.TokenID), strPtr(who.TokenName)
	act.UpdatedAt, act.Version = now, act.Version+1
	key := domain.RunKey{Project: act.Project, Domain: act.Domain, Run: act.RunName}
	if err := s.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND name = ?",
		key.Project, key.Domain, key.Run, act.Name).
		Updates(map[string]any{"decision": decision, "decided_by": act.DecidedBy,
			"decided_by_token_id": act.DecidedByTokenID, "decided_by_token_name": act.DecidedByTokenName, "decided_at": now,
			"decision_comment": act.DecisionComment, "updated_at": now, "version": gorm.Expr("version + 1")}).Error; err != nil {
		return Action{}, mapErr(err)
	}
	return act, s.event(ctx, key, act.Name, "action."+decision, map[string]any{"by": who.Label,
		"token_id": who.TokenID, "token_name": who.TokenName, "comment": comment})
}

// ErrAbortPending: an abort of one of the run's actions is still being
// delivered (abort_requested_at set), so the run cannot restart yet.
var ErrAbortPending = errors.New("an abort of the run is still being delivered")

// checkNoAbortPending returns ErrAbortPending when an action of the run has
// an abort being delivered. It locks no action: a new abort of the run
// takes the run's lock first, which the caller holds.
func (s *core) checkNoAbortPending(ctx context.Context, key domain.RunKey) error {
	var n int64
	if err := s.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND abort_requested_at IS NOT NULL",
		key.Project, key.Domain, key.Run).Count(&n).Error; err != nil {
		return mapErr(err)
	}
	if n > 0 {
		return ErrAbortPending
	}
	return nil
}
