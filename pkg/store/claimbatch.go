package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// LockAndClaimAttempts opens the evaluations of attempts in one statement:
// of the attempts of ids that are finished and not yet evaluated, it locks the runs (key order), then the actions (key
// order), then the tasks (id order), then the attempts (id order), level
// by level as the lock order wants, and marks the attempts evaluated at
// now. It returns them with their owners as locked, by run key then
// attempt id (each level comes back as one JSON array, matched up here:
// joining them in SQL went row by row over the others); the attempts of
// one run share its Run, and those of one action its Action, as locked.
// Every other attempt of ids (not finished, evaluated already, or missing)
// is not touched. Each level waits for the locks it takes, one
// after the other (the next level's one-time filter reads the count of the
// level before), as AssignTasks's do. As a transaction's first statement it
// begins the transaction on the by-key pool (poolByKey).
//
// whole names actions whose unfinished tasks are all locked with the
// attempts' own tasks, in the same id order: an evaluation that ends such
// an action's other tasks (a gang's cascade, a failed job's survivors)
// then re-locks rows it holds, and never locks a task below one it holds.
func (s Attempts) LockAndClaimAttempts(ctx context.Context, ids []int64, now time.Time,
	whole ...domain.ActionKey) ([]AttemptOwners, error) {
	s = Attempts{s.prefer(poolByKey)}
	if len(ids) == 0 {
		return nil, nil
	}
	var wp, wd, wr, wa []string
	for _, k := range whole {
		wp, wd, wr, wa = append(wp, k.Project), append(wd, k.Domain), append(wr, k.Run), append(wa, k.Action)
	}
	var raw [4][]byte
	err := scanRow(s.raw(ctx, claimAttemptsSQL, map[string]any{"ids": array(ids), "now": now,
		"wp": array(wp), "wd": array(wd), "wr": array(wr), "wa": array(wa)}), &raw[0], &raw[1], &raw[2], &raw[3])
	if err != nil {
		return nil, mapErr(err)
	}
	var runs []Run
	var acts []Action
	var tasks []Task
	var claimed []Attempt
	if err := decodeEach(raw[:], &runs, &acts, &tasks, &claimed); err != nil {
		return nil, fmt.Errorf("decode claimed attempts: %w", err)
	}
	runOf := make(map[domain.RunKey]Run, len(runs))
	for _, r := range runs {
		runOf[domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Name}] = r
	}
	actOf := make(map[domain.ActionKey]Action, len(acts))
	for _, a := range acts {
		actOf[domain.RunKey{Project: a.Project, Domain: a.Domain, Run: a.RunName}.Action(a.Name)] = a
	}
	taskOf := make(map[int64]Task, len(tasks))
	for _, t := range tasks {
		taskOf[t.ID] = t
	}
	out := make([]AttemptOwners, 0, len(claimed))
	for _, a := range claimed {
		t := taskOf[a.TaskID]
		key := domain.RunKey{Project: t.Project, Domain: t.Domain, Run: t.RunName}
		out = append(out, AttemptOwners{Run: runOf[key], Action: actOf[key.Action(t.ActionName)], Task: t, Attempt: a})
	}
	slices.SortFunc(out, func(a, b AttemptOwners) int {
		return cmp.Or(cmp.Compare(a.Run.Project, b.Run.Project), cmp.Compare(a.Run.Domain, b.Run.Domain),
			cmp.Compare(a.Run.Name, b.Run.Name), cmp.Compare(a.Attempt.ID, b.Attempt.ID))
	})
	return out, nil
}

// claimAttemptsSQL is LockAndClaimAttempts's statement. `pick` reads
// without locks; every later level re-checks its rows as locked (Postgres
// returns a locked row's latest version), and the claim re-checks the
// attempt as la locked it, so an attempt claimed meanwhile by another
// evaluation is left out. The claim's conditions are on la's columns, not
// on the attempts it updates: conditions there let the plan walk the
// partial index of the attempts not yet evaluated and match every entry
// against every locked attempt, on statistics taken while none waited.
// lt also locks the unfinished tasks of the whole actions, and returns
// only the attempts' own.
var claimAttemptsSQL = `
WITH pick AS (
	SELECT at.id, at.task_id, t.project, t.domain, t.run_name, t.action_name
	FROM attempts at JOIN tasks t ON t.id = at.task_id
	WHERE at.id = ANY(CAST(@ids AS bigint[])) AND at.finished_at IS NOT NULL AND at.evaluated_at IS NULL
), lr AS (
	SELECT row_to_json(r) AS j FROM runs r
	WHERE (r.project, r.domain, r.name) IN (SELECT project, domain, run_name FROM pick)
	ORDER BY r.project, r.domain, r.name FOR UPDATE OF r
), lx AS (
	SELECT row_to_json(x) AS j FROM actions x
	WHERE (x.project, x.domain, x.run_name, x.name) IN (SELECT project, domain, run_name, action_name FROM pick)
		AND (SELECT count(*) FROM lr) >= 0
	ORDER BY x.project, x.domain, x.run_name, x.name FOR UPDATE OF x
), lt AS (
	SELECT t.id, row_to_json(t) AS j FROM tasks t
	WHERE t.id IN (SELECT task_id FROM pick UNION SELECT s.id FROM tasks s
			JOIN unnest(CAST(@wp AS text[]), CAST(@wd AS text[]), CAST(@wr AS text[]), CAST(@wa AS text[])) w(p, d, r, a)
			ON (s.project, s.domain, s.run_name, s.action_name) = (w.p, w.d, w.r, w.a) WHERE s.state IN ` + sqlUnfinished + `)
		AND (SELECT count(*) FROM lx) >= 0
	ORDER BY t.id FOR UPDATE OF t
), la AS (
	SELECT at.id, at.finished_at, at.evaluated_at FROM attempts at
	WHERE at.id IN (SELECT id FROM pick) AND (SELECT count(*) FROM lt) >= 0
	ORDER BY at.id FOR UPDATE OF at
), c AS (
	UPDATE attempts at SET evaluated_at = @now, updated_at = @now FROM la
	WHERE at.id = la.id AND la.finished_at IS NOT NULL AND la.evaluated_at IS NULL
	RETURNING row_to_json(at) AS j
)
SELECT (SELECT coalesce(json_agg(j), '[]') FROM lr), (SELECT coalesce(json_agg(j), '[]') FROM lx),
	(SELECT coalesce(json_agg(j), '[]') FROM lt WHERE id IN (SELECT task_id FROM pick)), (SELECT coalesce(json_agg(j), '[]') FROM c)`
