package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/capstan-run/capstan/pkg/domain"
)

// RunDetail is a run with its actions, each with a page of its tasks, and
// its child runs (every step's, every generation's) by step, index and
// try.
type RunDetail struct {
	Run      Run
	Actions  []ActionDetail
	Children []RunChild
}

// ActionDetail is an action with one page of its tasks (TaskPage's order)
// and the counts of all its current generation's.
type ActionDetail struct {
	Action Action
	Tasks  []TaskDetail
	// TaskCounts counts the tasks of the action's current generation by
	// state (a state with none is absent); TaskCount is their sum.
	TaskCounts map[domain.TaskState]int
	TaskCount  int
	// NextCursor is the TaskPage.Cursor of the page after Tasks; "" when
	// Tasks reach the last task.
	NextCursor string
}

// TaskDetail is a task with its attempt history, oldest first.
type TaskDetail struct {
	Task     Task
	Attempts []Attempt
}

// Task pages. An action's tasks are listed the current generation first,
// each generation in index order: (generation DESC, idx), the order of the
// tasks_action_generation_idx index, which reads any page as one range
// (migration 00020).
const (
	// DefaultTaskPageSize is a page's size when TaskPage.Limit is 0.
	DefaultTaskPageSize = 100
	// MaxTaskPageSize bounds TaskPage.Limit.
	MaxTaskPageSize = 500
	// RunTasksPerAction is how many tasks GetRun reads of each action: a
	// first page small enough that a run of ten steps of 1,000 tasks reads
	// in a few milliseconds (each task's and attempt's JSON is Postgres's
	// largest cost of the read); the action's own pages hold the rest.
	RunTasksPerAction = 20
)

// TaskPage selects a page of an action's tasks.
type TaskPage struct {
	// Cursor is the NextCursor of the previous page; "" for the first.
	Cursor string
	// Limit is the page size, 1 to MaxTaskPageSize (clamped). Default
	// DefaultTaskPageSize.
	Limit int
}

// after returns the position the page starts after: the (generation,
// index) of the previous page's last task, or, for the first page, a
// position before every task. Errors: ErrBadCursor.
func (p TaskPage) after() (generation, idx int, err error) {
	if p.Cursor == "" {
		return math.MaxInt32, -1, nil
	}
	return decodeTaskCursor(p.Cursor)
}

// encodeTaskCursor is the cursor of the page after the task of generation
// and idx.
func encodeTaskCursor(generation, idx int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(generation) + ":" + strconv.Itoa(idx)))
}

// decodeTaskCursor returns the (generation, index) c encodes. Errors:
// ErrBadCursor when c is no encodeTaskCursor of two integers 0 to
// MaxInt32.
func decodeTaskCursor(c string) (generation, idx int, err error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, 0, ErrBadCursor
	}
	g, i, ok := strings.Cut(string(raw), ":")
	gen, errG := strconv.ParseInt(g, 10, 32)
	index, errI := strconv.ParseInt(i, 10, 32)
	if !ok || errG != nil || errI != nil || gen < 0 || index < 0 {
		return 0, 0, ErrBadCursor
	}
	return int(gen), int(index), nil
}

// detailsSQL reads a run's row (with @only set, only its key: an action's
// read needs no spec, which can list 10,000 items) with its actions (the
// one named @only, or all when @only is empty), the page of each action's tasks after the
// position (@generation, @idx) in (generation DESC, idx) order, at most
// @limit of them, the attempts of those tasks, and the counts of each
// action's current generation's tasks by state, each as the JSON Postgres
// builds from the rows (the models' json tags are the column names): one
// round trip, however many tasks. Each page is two ranges of
// tasks_action_generation_idx: the rest of generation @generation after
// @idx, then the generations below it; each count is one range of it
// (index-only once the heap pages are all-visible). Actions come root
// first, then in creation order. Without @only, the run's child runs come
// last (by runs_parent).
const detailsSQL = `WITH a AS MATERIALIZED (SELECT * FROM actions
	  WHERE project = @project AND domain = @domain AND run_name = @run AND (@only = '' OR name = @only)),
t AS MATERIALIZED (SELECT p.* FROM a CROSS JOIN LATERAL (
	(SELECT * FROM tasks x WHERE x.project = a.project AND x.domain = a.domain AND x.run_name = a.run_name
	    AND x.action_name = a.name AND x.generation = @generation AND x.idx > @idx ORDER BY x.idx LIMIT @limit)
	UNION ALL
	(SELECT * FROM tasks x WHERE x.project = a.project AND x.domain = a.domain AND x.run_name = a.run_name
	    AND x.action_name = a.name AND x.generation < @generation ORDER BY x.generation DESC, x.idx LIMIT @limit)
	ORDER BY generation DESC, idx LIMIT @limit) p)
SELECT CASE WHEN @only = '' THEN row_to_json(r) ELSE json_build_object('project', r.project, 'domain', r.domain,
	'name', r.name) END,
	(SELECT coalesce(json_agg(a ORDER BY a.parent_action_name NULLS FIRST, a.created_at, a.name), '[]') FROM a),
	(SELECT coalesce(json_agg(t ORDER BY t.action_name, t.generation DESC, t.idx), '[]') FROM t),
	(SELECT coalesce(json_agg(at ORDER BY at.task_id, at.number), '[]') FROM t JOIN attempts at ON at.task_id = t.id),
	(SELECT coalesce(json_agg(json_build_object('action', a.name, 'state', c.state, 'n', c.n)), '[]') FROM a
	   CROSS JOIN LATERAL (SELECT x.state, count(*) AS n FROM tasks x WHERE x.project = a.project AND x.domain = a.domain
	     AND x.run_name = a.run_name AND x.action_name = a.name AND x.generation = a.generation GROUP BY x.state) c),
	CASE WHEN @only = '' THEN (SELECT coalesce(json_agg(json_build_object('name', c.name, 'action', c.parent_action,
	     'index', c.parent_index, 'generation', c.parent_generation, 'try', c.parent_try, 'phase', c.phase)
	     ORDER BY c.parent_action, c.parent_index, c.parent_try), '[]')
	   FROM runs c WHERE c.project = r.project AND c.domain = r.domain AND c.parent_run = r.name) END
FROM runs r WHERE r.project = @project AND r.domain = @domain AND r.name = @run`

// stateCount is one row of detailsSQL's counts.
type stateCount struct {
	Action string           `json:"action"`
	State  domain.TaskState `json:"state"`
	N      int              `json:"n"`
}

// details loads a run (only its key when only is set) and its actions (or
// only the one named), each with the page of its tasks that page selects,
// their attempts and its task counts, and, when only is empty, its child
// runs. Errors: ErrNotFound (no such run), ErrBadCursor.
func (s *core) details(ctx context.Context, key domain.RunKey, only string, page TaskPage) (RunDetail, error) {
	var d RunDetail
	generation, idx, err := page.after()
	if err != nil {
		return d, err
	}
	limit := min(max(cmp.Or(page.Limit, DefaultTaskPageSize), 1), MaxTaskPageSize)
	var rawRun, rawActions, rawTasks, rawAttempts, rawCounts, rawChildren []byte
	err = scanRow(s.raw(ctx, detailsSQL, sql.Named("project", key.Project), sql.Named("domain", key.Domain),
		sql.Named("run", key.Run), sql.Named("only", only), sql.Named("generation", generation), sql.Named("idx", idx),
		sql.Named("limit", limit+1)), &rawRun, &rawActions, &rawTasks, &rawAttempts, &rawCounts, &rawChildren)
	if errors.Is(err, sql.ErrNoRows) {
		return d, ErrNotFound
	}
	if err != nil {
		return d, mapErr(err)
	}
	var actions []Action
	var tasks []Task
	var attempts []Attempt
	var counts []stateCount
	raws, into := [][]byte{rawRun, rawActions, rawTasks, rawAttempts, rawCounts}, []any{&d.Run, &actions, &tasks, &attempts, &counts}
	if rawChildren != nil {
		raws, into = append(raws, rawChildren), append(into, &d.Children)
	}
	if err := decodeEach(raws, into...); err != nil {
		return d, fmt.Errorf("run %s: decode rows: %w", key, err)
	}
	d.Actions = assemble(actions, tasks, attempts, counts, limit)
	return d, nil
}

// assemble gives each action its tasks (at most limit; one more says a
// next page exists), each task its attempts, and each action its counts.
func assemble(actions []Action, tasks []Task, attempts []Attempt, counts []stateCount, limit int) []ActionDetail {
	byTask := map[int64][]Attempt{}
	for _, a := range attempts {
		byTask[a.TaskID] = append(byTask[a.TaskID], a)
	}
	byAction := map[string][]TaskDetail{}
	for _, t := range tasks {
		byAction[t.ActionName] = append(byAction[t.ActionName], TaskDetail{Task: t, Attempts: byTask[t.ID]})
	}
	byCount := map[string]map[domain.TaskState]int{}
	for _, c := range counts {
		if byCount[c.Action] == nil {
			byCount[c.Action] = map[domain.TaskState]int{}
		}
		byCount[c.Action][c.State] = c.N
	}
	out := make([]ActionDetail, len(actions))
	for i, a := range actions {
		d := ActionDetail{Action: a, Tasks: byAction[a.Name], TaskCounts: byCount[a.Name]}
		for _, n := range d.TaskCounts {
			d.TaskCount += n
		}
		if len(d.Tasks) > limit {
			d.Tasks = d.Tasks[:limit]
			last := d.Tasks[limit-1].Task
			d.NextCursor = encodeTaskCursor(last.Generation, last.Idx)
		}
		out[i] = d
	}
	return out
}
