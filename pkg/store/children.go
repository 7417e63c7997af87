package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
)

// Child runs of workflow steps (Temporal's child workflows): their
// creation in the parent's transaction, the reads a parent's progression
// and the abort cascade make of them.

// CreateChildRuns inserts child runs (each NewRun with Child set), each
// with its root action a0 and "run.created" event as CreateRun does, in
// the transaction of the caller, which holds the parent run's lock.
// Errors: ErrConflict (a name is taken).
func (s Runs) CreateChildRuns(ctx context.Context, runs []NewRun) error {
	for _, nr := range runs {
		if nr.Child == nil {
			return fmt.Errorf("create child run %s: no parent", nr.Key)
		}
		if _, _, err := s.insertRun(ctx, nr); err != nil {
			return fmt.Errorf("create child run %s: %w", nr.Key, err)
		}
	}
	return nil
}

// TakenRunNames returns which of names are runs of project/domain.
func (s Runs) TakenRunNames(ctx context.Context, project, dom string, names []string) (map[string]bool, error) {
	var taken []string
	if err := s.raw(ctx, `SELECT name FROM runs WHERE project = ? AND domain = ? AND name = ANY(?)`,
		project, dom, Strings(names)).Scan(&taken).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make(map[string]bool, len(taken))
	for _, n := range taken {
		out[n] = true
	}
	return out, nil
}

// ChildRun is the latest child of one index of a workflow step.
type ChildRun struct {
	Action     string
	Index      int
	Name       string
	Phase      domain.Phase
	Generation int
	// Try is the child's (ChildOf.Try), the highest of its index.
	Try int
	// Tries counts the children of the index in the child's generation.
	Tries int
}

// stepChildrenSQL reads, for each named step of a run, the latest child
// of each index (the highest try) with how many children the index has
// in that child's generation, by runs_parent.
const stepChildrenSQL = `SELECT action, idx AS index, name, phase, generation, try, tries FROM (
	SELECT c.parent_action AS action, c.parent_index AS idx, c.name, c.phase, c.parent_generation AS generation,
		c.parent_try AS try,
		count(*) OVER (PARTITION BY c.parent_action, c.parent_index, c.parent_generation) AS tries,
		row_number() OVER (PARTITION BY c.parent_action, c.parent_index ORDER BY c.parent_try DESC) AS rn
	  FROM runs c
	 WHERE c.project = ? AND c.domain = ? AND c.parent_run = ? AND c.parent_action = ANY(?)) x
WHERE rn = 1 ORDER BY action, idx`

// StepChildren returns, by step name, the latest child of each index of
// the run's named workflow steps (every generation's: the caller compares
// Generation with the step's), in index order.
func (s Runs) StepChildren(ctx context.Context, key domain.RunKey, steps []string) (map[string][]ChildRun, error) {
	if len(steps) == 0 {
		return nil, nil
	}
	var rows []ChildRun
	if err := s.raw(ctx, stepChildrenSQL, key.Project, key.Domain, key.Run, Strings(steps)).Scan(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make(map[string][]ChildRun, len(steps))
	for _, r := range rows {
		out[r.Action] = append(out[r.Action], r)
	}
	return out, nil
}

// RunChild is one child run of a run, for its page (RunDetail.Children).
type RunChild struct {
	Name       string `json:"name"`
	Action     string `json:"action"`
	Index      int    `json:"index"`
	Generation int    `json:"generation"`
	Try        int    `json:"try"`
	Phase      string `json:"phase"`
}

// LiveChildRuns returns the child runs not yet ended whose parent step is
// the action under key or one of its descendants: what an abort of it
// must reach, by name.
func (s Runs) LiveChildRuns(ctx context.Context, key domain.ActionKey) ([]domain.RunKey, error) {
	var names []string
	args := append([]any{key.Project, key.Domain, key.Run}, subtreeArgs(key)...)
	if err := s.raw(ctx, `SELECT name FROM runs WHERE project = ? AND domain = ? AND parent_run = ?
		AND parent_action IN (`+subtreeSQL+`) AND ended_at IS NULL ORDER BY name`, args...).Scan(&names).Error; err != nil {
		return nil, mapErr(err)
	}
	keys := make([]domain.RunKey, len(names))
	for i, n := range names {
		keys[i] = domain.RunKey{Project: key.Project, Domain: key.Domain, Run: n}
	}
	return keys, nil
}

// ancestrySQL reads a run and its ancestors, nearest first, with the
// template each runs (” for an inline spec), by parent_run.
const ancestrySQL = `WITH RECURSIVE up(name, parent_run, workflow_name, n) AS (
	SELECT name, parent_run, coalesce(workflow_name, ''), 0 FROM runs WHERE project = @p AND domain = @d AND name = @run
	UNION ALL
	SELECT r.name, r.parent_run, coalesce(r.workflow_name, ''), up.n + 1 FROM runs r JOIN up ON r.name = up.parent_run
	 WHERE r.project = @p AND r.domain = @d AND up.n < @limit)
SELECT workflow_name FROM up ORDER BY n`

// AncestorWorkflows returns the templates the run and its ancestors run,
// the run's first, then its parent's…: "" for an inline spec. Errors:
// ErrNotFound.
func (s Runs) AncestorWorkflows(ctx context.Context, key domain.RunKey) ([]string, error) {
	var names []string
	err := s.raw(ctx, ancestrySQL, map[string]any{"p": key.Project, "d": key.Domain, "run": key.Run,
		"limit": domain.MaxDepth + 1}).Scan(&names).Error
	if err == nil && len(names) == 0 {
		return nil, ErrNotFound
	}
	return names, mapErr(err)
}

// StartChildStep records that a workflow step started its children: it is
// started at now, in phase QUEUED until they move, and an
// "action.children_started" event names them.
func (s Actions) StartChildStep(ctx context.Context, key domain.ActionKey, children []string, now time.Time) error {
	if err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(map[string]any{
		"started_at": gorm.Expr("coalesce(started_at, ?)", now), "updated_at": now,
		"version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.children_started", map[string]any{"children": children})
}

// SucceedChildStep ends a workflow step SUCCEEDED (from from) with the
// outputs gathered from its children, and writes an "action.phase" event.
// It changes nothing and returns false when the step is no longer in
// phase from.
func (s Actions) SucceedChildStep(ctx context.Context, key domain.ActionKey, from domain.Phase, outputs map[string]string,
	now time.Time) (bool, error) {
	res := s.q(ctx).Model(&Action{}).Where(actionWhere+" AND phase = ?", append(actionArgs(key), string(from))...).
		Updates(map[string]any{"phase": string(domain.PhaseSucceeded), "outputs": jsonText(outputs), "ended_at": now,
			"updated_at": now, "version": gorm.Expr("version + 1")})
	if res.Error != nil || res.RowsAffected == 0 {
		return false, mapErr(res.Error)
	}
	return true, s.event(ctx, key.RunKey, key.Action, "action.phase", map[string]any{"from": from, "to": domain.PhaseSucceeded})
}

// FailStep ends a step FAILED (from from) with reason, and writes an
// "action.phase" event; a step not in phase from is left as it is.
func (s Actions) FailStep(ctx context.Context, key domain.ActionKey, from domain.Phase, reason string, now time.Time) error {
	res := s.q(ctx).Model(&Action{}).Where(actionWhere+" AND phase = ?", append(actionArgs(key), string(from))...).
		Updates(map[string]any{"phase": string(domain.PhaseFailed), "reason": reason, "ended_at": now,
			"started_at": gorm.Expr("coalesce(started_at, ?)", now), "waiting_for": nil, "not_before": nil,
			"updated_at": now, "version": gorm.Expr("version + 1")})
	if res.Error != nil || res.RowsAffected == 0 {
		return mapErr(res.Error)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.phase", map[string]any{"from": from, "to": domain.PhaseFailed,
		"reason": reason})
}

// RunOutputs returns the outputs of each of the runs (their specs'
// outputs over their SUCCEEDED steps' outputs, domain.RunOutputs), by run
// name; a run that does not exist is absent.
func (s Runs) RunOutputs(ctx context.Context, keys []domain.RunKey) (map[string]map[string]string, error) {
	out := make(map[string]map[string]string, len(keys))
	for _, k := range keys {
		var run Run
		err := scanRows(s.raw(ctx, `SELECT row_to_json(r) FROM runs r WHERE project = ? AND domain = ? AND name = ?`,
			k.Project, k.Domain, k.Run), &run)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(run.Spec.Outputs) == 0 {
			out[k.Run] = map[string]string{}
			continue
		}
		steps, err := s.actions().StepOutputs(ctx, k, nil)
		if err != nil {
			return nil, err
		}
		out[k.Run] = run.Spec.RunOutputs(steps)
	}
	return out, nil
}
