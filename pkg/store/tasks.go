package store

import (
	"cmp"
	"context"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"go.opentelemetry.io/otel/propagation"
)

// StartedStep is a starting step of a run, by its action's name, and its
// tasks (NewTaskRows).
type StartedStep struct {
	Action string
	Tasks  []Task
}

// CreateTasks inserts the tasks of a run's starting steps (as InsertTasks
// does) and marks their actions started (started_at, then an
// "action.started" event each, in the steps' order), in one statement
// whatever the number of steps: a fan-out's branches start together. No
// steps: nothing. It does not fill the tasks' ids.
func (s Tasks) CreateTasks(ctx context.Context, run domain.RunKey, now time.Time, steps ...StartedStep) error {
	return s.CreateTasksOfRuns(ctx, now, RunStart{Run: run, Steps: steps})
}

// RunStart is a run's starting steps (CreateTasksOfRuns).
type RunStart struct {
	Run   domain.RunKey
	Steps []StartedStep
}

// CreateTasksOfRuns is CreateTasks for the starting steps of several runs,
// in one statement; the events follow in starts' order, each run's in its
// steps' order. The caller holds the runs' locks, and so that of every
// action it marks (the lock order). No steps: nothing.
func (s Tasks) CreateTasksOfRuns(ctx context.Context, now time.Time, starts ...RunStart) error {
	var tasks []Task
	var projects, domains, runs, names Strings
	for _, rs := range starts {
		for _, st := range rs.Steps {
			tasks = append(tasks, st.Tasks...)
			projects, domains = append(projects, rs.Run.Project), append(domains, rs.Run.Domain)
			runs, names = append(runs, rs.Run.Run), append(names, st.Action)
		}
	}
	if len(names) == 0 {
		return nil
	}
	rows, err := taskRows(ctx, tasks, now)
	if err != nil {
		return err
	}
	err = s.exec(ctx, `WITH t AS (`+insertTasksSQL+` RETURNING 1)
		UPDATE actions a SET started_at = @now, updated_at = @now, version = a.version + 1
		FROM unnest(CAST(CAST(@p AS text) AS text[]), CAST(CAST(@d AS text) AS text[]),
			CAST(CAST(@r AS text) AS text[]), CAST(CAST(@n AS text) AS text[])) AS k(p, d, r, n)
		WHERE (a.project, a.domain, a.run_name, a.name) = (k.p, k.d, k.r, k.n)`,
		map[string]any{"rows": rows, "now": now, "p": projects, "d": domains, "r": runs, "n": names}).Error
	if err != nil {
		return mapErr(err)
	}
	for _, rs := range starts {
		for _, st := range rs.Steps {
			if err := s.event(ctx, rs.Run, st.Action, "action.started", map[string]any{"tasks": len(st.Tasks)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// InsertTasks inserts tasks, in one statement; a task of the same action,
// generation and index that exists is left alone. A task without a
// TraceParent takes ctx's trace context; one without CreatedAt, now. It
// does not fill the tasks' ids.
func (s Tasks) InsertTasks(ctx context.Context, tasks []Task) error {
	rows, err := taskRows(ctx, tasks, time.Now().UTC())
	if err != nil {
		return err
	}
	return mapErr(s.exec(ctx, insertTasksSQL, map[string]any{"rows": rows}).Error)
}

// insertTasksSQL inserts the tasks of the JSON array @rows (taskRows),
// each with its run's fairness key (taskValues; the runs' keys read once a
// run, in fk).
var insertTasksSQL = `WITH j AS MATERIALIZED (SELECT * FROM jsonb_populate_recordset(NULL::tasks, CAST(@rows AS jsonb))),
	fk AS MATERIALIZED (` + runFairnessKeys("(SELECT DISTINCT project, domain, run_name FROM j)") + `)
	INSERT INTO tasks (` + taskColumns + `) SELECT ` + taskValues + ` FROM j
	JOIN fk ON (fk.project, fk.domain, fk.run_name) = (j.project, j.domain, j.run_name) ON CONFLICT DO NOTHING`

// taskColumns lists the columns of tasks but id.
var taskColumns = columnsOf[Task]()

// taskValues is taskColumns as an insert selects them from the rows j
// (jsonb_populate_recordset) joined to fk (runFairnessKeys) by run: every
// column from j but fairness_key, which is the run's. A task's key is so
// copied from its run with one probe of runs a run: no caller needs to
// know it, and a task inserted costs no probe of its own (which a probe a
// task, by a subquery, cost: half again the insert of a 10,000-task step).
var taskValues = func() string {
	cols := strings.Split(taskColumns, ", ")
	for i, c := range cols {
		cols[i] = "j." + c
		if c == "fairness_key" {
			cols[i] = "fk.fairness_key"
		}
	}
	return strings.Join(cols, ", ")
}()

// runFairnessKeys selects (project, domain, run_name, fairness_key) of the
// runs of keys, a relation of (project, domain, run_name) without
// repeats, one probe of runs_pkey each (an empty key for a run that is
// not there).
func runFairnessKeys(keys string) string {
	return `SELECT k.project, k.domain, k.run_name, coalesce((SELECT r.fairness_key FROM runs r
		WHERE r.project = k.project AND r.domain = k.domain AND r.name = k.run_name), '') AS fairness_key FROM ` +
		keys + ` k`
}

// taskRows returns tasks as the JSON array insertTasksSQL reads, with
// TraceParent from ctx and CreatedAt/UpdatedAt now where they are unset.
func taskRows(ctx context.Context, tasks []Task, now time.Time) (string, error) {
	tp := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, tp)
	for i := range tasks {
		tasks[i].TraceParent = cmp.Or(tasks[i].TraceParent, tp["traceparent"])
		if tasks[i].CreatedAt.IsZero() {
			tasks[i].CreatedAt = now
		}
		if tasks[i].UpdatedAt.IsZero() {
			tasks[i].UpdatedAt = now
		}
	}
	raw, err := encodeRows(tasks)
	return string(raw), err
}

// LockAttemptOwners locks the run, the action and the task an attempt
// belongs to, in the lock order, in one statement, and returns them with the
// attempt (read, not locked). Errors: ErrNotFound.
func (s Tasks) LockAttemptOwners(ctx context.Context, attemptID int64) (Run, Action, Task, Attempt, error) {
	var run Run
	var act Action
	var t Task
	var a Attempt
	err := scanRows(s.raw(ctx, `SELECT row_to_json(r), row_to_json(x), row_to_json(t), row_to_json(at)
		FROM attempts at JOIN tasks t ON t.id = at.task_id
		JOIN actions x ON (x.project, x.domain, x.run_name, x.name) = (t.project, t.domain, t.run_name, t.action_name)
		JOIN runs r ON (r.project, r.domain, r.name) = (t.project, t.domain, t.run_name)
		WHERE at.id = ? FOR UPDATE OF r, x, t`, attemptID), &run, &act, &t, &a)
	return run, act, t, a, err
}

// CountTaskStates returns how many tasks of an action's generation are in
// each state.
func (s Tasks) CountTaskStates(ctx context.Context, key domain.ActionKey, generation int) (map[domain.TaskState]int, error) {
	var rows []struct {
		State domain.TaskState
		N     int
	}
	if err := s.q(ctx).Model(&Task{}).Select("state, count(*) AS n").
		Where("project = ? AND domain = ? AND run_name = ? AND action_name = ? AND generation = ?",
			key.Project, key.Domain, key.Run, key.Action, generation).
		Group("state").Scan(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make(map[domain.TaskState]int, len(rows))
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out, nil
}

// CountWaitingTasks returns how many tasks of an action's generation are
// PENDING within a run of waits for their target (wait_count > 0).
func (s Tasks) CountWaitingTasks(ctx context.Context, key domain.ActionKey, generation int) (int, error) {
	var n int64
	err := s.q(ctx).Model(&Task{}).Where(`project = ? AND domain = ? AND run_name = ? AND action_name = ?
		AND generation = ? AND state = ? AND wait_count > 0`, key.Project, key.Domain, key.Run, key.Action, generation,
		domain.TaskPending).Count(&n).Error
	return int(n), mapErr(err)
}

// ExhaustGangSiblings makes the live tasks of t's action other than t
// WORKER_FAILED with their preemption budget spent (preemption_count =
// max_retries_preemption + 1), and writes an "action.gang_cascade" event.
// It returns how many it changed.
func (s Tasks) ExhaustGangSiblings(ctx context.Context, t Task, now time.Time) (int64, error) {
	res := s.exec(ctx, `WITH l AS (SELECT id FROM tasks WHERE project = ? AND domain = ? AND run_name = ?
			AND action_name = ? AND id <> ? AND state IN `+sqlLive+` ORDER BY id FOR UPDATE)
		UPDATE tasks SET state = ?, preemption_count = max_retries_preemption + 1, ended_at = ?, updated_at = ?,
			version = tasks.version + 1 FROM l WHERE tasks.id = l.id`,
		t.Project, t.Domain, t.RunName, t.ActionName, t.ID, domain.TaskWorkerFailed, now, now)
	if res.Error != nil || res.RowsAffected == 0 {
		return 0, mapErr(res.Error)
	}
	return res.RowsAffected, s.taskEvent(ctx, t, 0, "action.gang_cascade", map[string]any{"siblings": res.RowsAffected})
}

// KillUnfinishedTasks makes an action's PENDING and live tasks KILLED, in id
// order, and returns how many it changed.
func (s Tasks) KillUnfinishedTasks(ctx context.Context, key domain.ActionKey, now time.Time) (int64, error) {
	res := s.exec(ctx, `WITH l AS (SELECT id FROM tasks WHERE project = ? AND domain = ? AND run_name = ?
			AND action_name = ? AND state IN `+sqlUnfinished+` ORDER BY id FOR UPDATE)
		UPDATE tasks SET state = ?, ended_at = ?, updated_at = ?, version = tasks.version + 1
		FROM l WHERE tasks.id = l.id`, key.Project, key.Domain, key.Run, key.Action, domain.TaskKilled, now, now)
	return res.RowsAffected, mapErr(res.Error)
}

// MarkTasksUnschedulable makes an action's PENDING tasks past their
// scheduling deadline UNSCHEDULABLE, writes a "task.unschedulable" event and
// returns how many it changed. It locks every unfinished task of the
// action, in id order, so that the kill of its survivors that may follow
// (KillUnfinishedTasks) locks only rows the transaction holds.
func (s Tasks) MarkTasksUnschedulable(ctx context.Context, key domain.ActionKey, now time.Time) (int64, error) {
	res := s.exec(ctx, `WITH l AS (SELECT id, state, scheduling_deadline FROM tasks WHERE project = ? AND domain = ?
			AND run_name = ? AND action_name = ? AND state IN `+sqlUnfinished+` ORDER BY id FOR UPDATE)
		UPDATE tasks SET state = ?, ended_at = ?, updated_at = ?, version = tasks.version + 1
		FROM l WHERE tasks.id = l.id AND l.state IN `+sqlPending+` AND l.scheduling_deadline < ?`,
		key.Project, key.Domain, key.Run, key.Action, domain.TaskUnschedulable, now, now, now)
	if res.Error != nil || res.RowsAffected == 0 {
		return 0, mapErr(res.Error)
	}
	return res.RowsAffected, s.event(ctx, key.RunKey, key.Action, "task.unschedulable",
		map[string]any{"tasks": res.RowsAffected})
}

// WithAdmission sets on rows (NewTaskRows, in index order) their
// admission (domain.Step.TaskAdmissions, one per row); nil leaves them
// without.
func WithAdmission(rows []Task, adm []domain.TaskAdmission) []Task {
	for i := range adm {
		rows[i].ConcurrencyKey, rows[i].RateLimits = adm[i].ConcurrencyKey, adm[i].RateLimits
		if adm[i].ConcurrencyKey != nil {
			rows[i].ConcurrencyMax = &adm[i].ConcurrencyMax
		}
	}
	return rows
}

// NewTaskRows returns the rows of tasks (domain.StepTasks) of action key's
// generation, for CreateTasks and InsertTasks.
func NewTaskRows(key domain.ActionKey, generation int, tasks []domain.NewTask) []Task {
	rows := make([]Task, len(tasks))
	for i, t := range tasks {
		rows[i] = Task{Project: key.Project, Domain: key.Domain, RunName: key.Run, ActionName: key.Action, Idx: t.Idx,
			Generation: generation, State: t.State, MaxRetriesFailure: t.MaxRetriesFailure,
			MaxRetriesPreemption: t.MaxRetriesPreemption, MaxSystemFailures: t.MaxSystemFailures,
			Priority: int16(t.Priority), CPUMillis: t.Resources.CPUMillis, MemoryBytes: t.Resources.MemoryBytes,
			Constraints: t.Constraints, Coscheduled: t.Coscheduled, Plugin: t.Plugin,
			TimeoutMs: t.AttemptTimeout.Milliseconds(), SchedulingDeadline: t.SchedulingDeadline, Item: t.Item,
			Version: 1}
	}
	return rows
}
