package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// ExpandSteps inserts the step actions of a run that are missing (QUEUED,
// children of a0), writes a "run.expanded" event when it inserted any, and
// returns every step action of the run. The caller holds the run's lock.
func (s *Store) ExpandSteps(ctx context.Context, key domain.RunKey, steps []domain.Step) ([]Action, error) {
	rows := stepRows(key, steps, nil, time.Now().UTC())
	raw, err := json.Marshal(rows)
	if err != nil {
		return nil, fmt.Errorf("steps of %s: %w", key, err)
	}
	res := s.q(ctx).Exec(insertActionsSQL+` ON CONFLICT DO NOTHING`, string(raw))
	if res.Error != nil {
		return nil, mapErr(res.Error)
	}
	if res.RowsAffected == 0 {
		return s.StepActions(ctx, key) // expanded before
	}
	if err := s.event(ctx, key, domain.RootActionName, "run.expanded", map[string]any{"steps": len(rows)}); err != nil {
		return nil, err
	}
	if res.RowsAffected == int64(len(rows)) {
		return rows, nil // every step was missing: the rows are the steps
	}
	return s.StepActions(ctx, key)
}

// ExpandAndStart expands a run none of whose step actions exists yet and
// starts the given steps (their actions inserted started, their tasks with
// them), in one statement, with the events ExpandSteps and CreateTasks
// write ("run.expanded", then "action.started" for each started step in
// order). It is ExpandSteps then CreateTasks for a run's first advance, one
// statement instead of two. When any step action exists it changes nothing
// and returns false: the caller expands and decides as for any other
// advance. The caller holds the run's lock.
func (s *Store) ExpandAndStart(ctx context.Context, key domain.RunKey, steps []domain.Step, now time.Time,
	started ...StartedStep) (bool, error) {
	names := make(map[string]bool, len(started))
	var tasks []Task
	for _, st := range started {
		names[st.Action] = true
		tasks = append(tasks, st.Tasks...)
	}
	actions, err := json.Marshal(stepRows(key, steps, names, now))
	if err != nil {
		return false, fmt.Errorf("steps of %s: %w", key, err)
	}
	taskJSON, err := taskRows(ctx, tasks, now)
	if err != nil {
		return false, err
	}
	var inserted int
	err = s.q(ctx).Raw(`WITH x AS (INSERT INTO actions (`+actionColumns+`) SELECT `+actionColumns+`
			FROM jsonb_populate_recordset(NULL::actions, CAST(@actions AS jsonb)) WHERE NOT EXISTS (SELECT 1 FROM actions
			WHERE project = @p AND domain = @d AND run_name = @r AND name <> @root) RETURNING 1),
		t AS (INSERT INTO tasks (`+taskColumns+`) SELECT `+taskColumns+`
			FROM jsonb_populate_recordset(NULL::tasks, CAST(@rows AS jsonb)) WHERE EXISTS (SELECT 1 FROM x))
		SELECT count(*) FROM x`,
		map[string]any{"actions": string(actions), "rows": taskJSON, "p": key.Project, "d": key.Domain, "r": key.Run,
			"root": domain.RootActionName}).Scan(&inserted).Error
	if err != nil || inserted == 0 {
		return false, mapErr(err)
	}
	if err := s.event(ctx, key, domain.RootActionName, "run.expanded", map[string]any{"steps": len(steps)}); err != nil {
		return false, err
	}
	for _, st := range started {
		if err := s.event(ctx, key, st.Action, "action.started", map[string]any{"tasks": len(st.Tasks)}); err != nil {
			return false, err
		}
	}
	return true, nil
}

// stepRows returns the step actions of a run's steps (QUEUED, children of
// a0); those named in started are started at now.
func stepRows(key domain.RunKey, steps []domain.Step, started map[string]bool, now time.Time) []Action {
	root := domain.RootActionName
	rows := make([]Action, 0, len(steps))
	for _, st := range steps {
		a := Action{Project: key.Project, Domain: key.Domain, RunName: key.Run, Name: st.Name,
			ParentActionName: &root, Kind: st.Kind, Spec: st, DependsOn: Strings(append([]string{}, st.DependsOn...)),
			Phase: string(domain.PhaseQueued), TimeoutMs: st.TimeoutDuration().Milliseconds(), Version: 1,
			CreatedAt: now, UpdatedAt: now}
		if started[st.Name] {
			a.StartedAt = &now
		}
		rows = append(rows, a)
	}
	return rows
}
