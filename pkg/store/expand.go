package store

import (
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// ExpandSteps inserts the step actions of a run that are missing (QUEUED,
// children of a0), writes a "run.expanded" event when it inserted any, and
// returns every step action of the run. The caller holds the run's lock.
func (s Runs) ExpandSteps(ctx context.Context, key domain.RunKey, steps []domain.Step) ([]Action, error) {
	rows := stepRows(key, steps, nil, time.Now().UTC())
	raw, err := encodeRows(rows)
	if err != nil {
		return nil, fmt.Errorf("steps of %s: %w", key, err)
	}
	res := s.exec(ctx, insertActionsSQL+` ON CONFLICT DO NOTHING`, string(raw))
	if res.Error != nil {
		return nil, mapErr(res.Error)
	}
	if res.RowsAffected == 0 {
		return s.actions().StepActions(ctx, key) // expanded before
	}
	if err := s.event(ctx, key, domain.RootActionName, "run.expanded", map[string]any{"steps": len(rows)}); err != nil {
		return nil, err
	}
	if res.RowsAffected == int64(len(rows)) {
		return rows, nil // every step was missing: the rows are the steps
	}
	return s.actions().StepActions(ctx, key)
}

// FreshRun is a run's first advance for ExpandAndStartRuns: its steps, and
// the steps it starts with their tasks.
type FreshRun struct {
	Key     domain.RunKey
	Steps   []domain.Step
	Started []StartedStep
}

// ExpandAndStartRuns expands and starts, in one statement, each of runs
// (distinct keys) none of whose step actions exists yet: its step actions
// are inserted, those of the given steps started with their tasks, and its
// events written ("run.expanded", then "action.started" for each started
// step in order; the runs in the given order). It is ExpandSteps then
// CreateTasks for a run's first advance. It reports for each run whether
// it did; a run with a step action is left unchanged, for the caller to
// expand and decide as for any other advance. The caller holds the runs'
// locks.
func (s Runs) ExpandAndStartRuns(ctx context.Context, now time.Time, runs ...FreshRun) ([]bool, error) {
	var actions []Action
	var tasks []Task
	p, d, r := make([]string, len(runs)), make([]string, len(runs)), make([]string, len(runs))
	for i, run := range runs {
		names := make(map[string]bool, len(run.Started))
		for _, st := range run.Started {
			names[st.Action] = true
			tasks = append(tasks, st.Tasks...)
		}
		actions = append(actions, stepRows(run.Key, run.Steps, names, now)...)
		p[i], d[i], r[i] = run.Key.Project, run.Key.Domain, run.Key.Run
	}
	actionJSON, err := encodeRows(actions)
	if err != nil {
		return nil, fmt.Errorf("steps: %w", err)
	}
	taskJSON, err := taskRows(ctx, tasks, now)
	if err != nil {
		return nil, err
	}
	args := map[string]any{"actions": string(actionJSON), "rows": taskJSON, "root": domain.RootActionName}
	args["p"], args["d"], args["r"] = Strings(p), Strings(d), Strings(r)
	var expanded []int64 // the runs' ordinals
	if err := s.raw(ctx, expandAndStartSQL, args).Scan(&expanded).Error; err != nil {
		return nil, mapErr(err)
	}
	fresh := make([]bool, len(runs))
	for _, n := range expanded {
		fresh[n-1] = true
	}
	for i, run := range runs {
		if !fresh[i] {
			continue
		}
		if err := s.event(ctx, run.Key, domain.RootActionName, "run.expanded", map[string]any{"steps": len(run.Steps)}); err != nil {
			return nil, err
		}
		for _, st := range run.Started {
			if err := s.event(ctx, run.Key, st.Action, "action.started", map[string]any{"tasks": len(st.Tasks)}); err != nil {
				return nil, err
			}
		}
	}
	return fresh, nil
}

// expandAndStartSQL inserts the step actions (@actions) and the tasks
// (@rows, each with its run's fairness key: fk, taskValues) of the runs
// of @p, @d, @r that have no step action (f), and
// returns those runs' ordinals. The keys come as arrays: call it on
// the by-key pool.
var expandAndStartSQL = `WITH k AS (SELECT * FROM unnest(CAST(CAST(@p AS text) AS text[]),
		CAST(CAST(@d AS text) AS text[]), CAST(CAST(@r AS text) AS text[]))
		WITH ORDINALITY AS k(project, domain, run_name, n)),
	f AS (SELECT * FROM k WHERE NOT EXISTS (SELECT 1 FROM actions a
		WHERE a.project = k.project AND a.domain = k.domain AND a.run_name = k.run_name AND a.name <> @root)),
	x AS (INSERT INTO actions (` + actionColumns + `) SELECT ` + actionColumns + `
		FROM jsonb_populate_recordset(NULL::actions, CAST(@actions AS jsonb)) j
		WHERE (j.project, j.domain, j.run_name) IN (SELECT project, domain, run_name FROM f)),
	fk AS (` + runFairnessKeys("f") + `),
	t AS (INSERT INTO tasks (` + taskColumns + `) SELECT ` + taskValues + `
		FROM jsonb_populate_recordset(NULL::tasks, CAST(@rows AS jsonb)) j
		JOIN fk ON (fk.project, fk.domain, fk.run_name) = (j.project, j.domain, j.run_name))
	SELECT n FROM f`

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

// runKeyArrays returns keys as three parallel text arrays (projects,
// domains, run names), for a statement that unnests them.
func runKeyArrays(keys []domain.RunKey) (projects, domains, names Strings) {
	projects, domains, names = make(Strings, len(keys)), make(Strings, len(keys)), make(Strings, len(keys))
	for i, k := range keys {
		projects[i], domains[i], names[i] = k.Project, k.Domain, k.Run
	}
	return projects, domains, names
}

// TryLockRuns locks the rows of the named runs that no other transaction
// holds (FOR UPDATE SKIP LOCKED), in key order (the lock order's first
// level), in one statement, and returns them by key. A run missing from the
// result does not exist or was held: the caller leaves it to a transaction
// of its own (LockRun waits, and tells the two apart). keys may repeat.
// With place set it also tries the placement lock (Placement.Lock's), in
// the same statement and without waiting, and reports whether it got it
// (held to the transaction's end): a start may place its runs' tasks only
// then, and the reads after this statement see every bind a pass
// committed. As a transaction's first statement it begins the transaction
// on the by-key pool (poolByKey).
func (s Runs) TryLockRuns(ctx context.Context, keys []domain.RunKey, place bool) (map[domain.RunKey]Run, bool, error) {
	s = Runs{s.prefer(poolByKey)}
	projects, domains, names := runKeyArrays(keys)
	var raw []byte
	var placing bool
	err := scanRow(s.raw(ctx, `WITH l AS (SELECT * FROM runs WHERE (project, domain, name) IN
			(SELECT * FROM unnest(CAST(CAST(? AS text) AS text[]), CAST(CAST(? AS text) AS text[]),
				CAST(CAST(? AS text) AS text[])))
			ORDER BY project, domain, name FOR UPDATE SKIP LOCKED),
		p AS MATERIALIZED (SELECT CASE WHEN CAST(? AS boolean) THEN pg_try_advisory_xact_lock(CAST(? AS bigint))
			ELSE false END AS got)
		SELECT coalesce(json_agg(l), '[]'), (SELECT got FROM p) FROM l`, projects, domains, names, place, placementLock),
		&raw, &placing)

	if err != nil {
		return nil, false, mapErr(err)
	}
	var runs []Run
	if err := decodeRows(raw, &runs); err != nil {
		return nil, false, fmt.Errorf("decode runs: %w", err)
	}
	out := make(map[domain.RunKey]Run, len(runs))
	for _, r := range runs {
		out[domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Name}] = r
	}
	return out, placing, nil
}
