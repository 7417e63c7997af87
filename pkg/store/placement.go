package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// placementLock is the key of the placement lock, a transaction-scoped
// advisory lock: a scheduling pass holds it from its read to its commit
// (Placement.Lock), and a start that places its runs' tasks from its runs'
// lock to its commit (TryLockRuns), so one placement at a time reads the
// workers' loads, with every attempt the others bound.
const placementLock int64 = 0x6361707374616e // "capstan"

// Lock takes the placement lock (placementLock) for the rest of the
// caller's transaction, waiting for it. Taken first, before any other lock
// of the transaction, it waits on no row lock's holder; a start only tries
// it. As a transaction's first statement it begins the transaction on the
// pass's connection (poolPass). Errors: Postgres's, and one outside a
// transaction.
func (s Placement) Lock(ctx context.Context) error {
	if s.tx == nil {
		return errors.New("store: the placement lock outside a transaction")
	}
	s = Placement{s.prefer(poolPass)}
	return mapErr(s.exec(ctx, `SELECT pg_advisory_xact_lock(CAST(? AS bigint))`, placementLock).Error)
}

// pendingTasksSQL reads the PENDING tasks a pass places, by fair-share
// group: (band, project, fairness key). g finds the groups with a loose
// scan of tasks_pending_fair (one probe per group, whatever their tasks),
// highest band first, then project, then key: at most q.keys keys of one
// project in a band, and q.lim groups in all (q: the parameters limit and
// keys). r reads the oldest per tasks of each, per = ⌈q.lim / groups⌉, whose not_before has passed
// and whose scheduling deadline has not (a task past its deadline is left
// for the expiry pass, which ends its job: Iris's
// _mark_task_unschedulable), so that a read holds every project's oldest
// tasks however many another holds. e completes the gang that a group's
// read ended in, by its action's key (OFFSET 0: no PENDING index can serve
// the probe): a gang is placed whole or not at all (Iris). One row: the
// tasks as one JSON array (decodeRows), highest band first, then oldest;
// per; full, set when the read may have left a placeable task unread (a
// group read to per, the groups cut, or a project's keys); groups; and the
// projects read. The bounds are parameters, so the statement keeps its plan
// on the pass's connection.
var pendingTasksSQL = `WITH RECURSIVE q AS (SELECT CAST(? AS integer) AS lim, CAST(? AS integer) AS keys),
	g AS (
		(SELECT priority, project, fairness_key, 1 AS n, 1 AS nk FROM tasks WHERE state IN ` + sqlPending + `
			ORDER BY priority DESC, project, fairness_key LIMIT 1)
		UNION ALL
		SELECT x.priority, x.project, x.fairness_key, g.n + 1,
			CASE WHEN (x.priority, x.project) = (g.priority, g.project) THEN g.nk + 1 ELSE 1 END
		FROM g CROSS JOIN LATERAL (
			(SELECT priority, project, fairness_key FROM tasks WHERE state IN ` + sqlPending + ` AND g.nk < (SELECT keys FROM q)
				AND priority = g.priority AND project = g.project AND fairness_key > g.fairness_key
				ORDER BY fairness_key LIMIT 1)
			UNION ALL
			(SELECT priority, project, fairness_key FROM tasks WHERE state IN ` + sqlPending + `
				AND priority = g.priority AND project > g.project ORDER BY project, fairness_key LIMIT 1)
			UNION ALL
			(SELECT priority, project, fairness_key FROM tasks WHERE state IN ` + sqlPending + `
				AND priority < g.priority ORDER BY priority DESC, project, fairness_key LIMIT 1)
			LIMIT 1) x
		WHERE g.n < (SELECT lim FROM q)),
	k AS (SELECT CAST(greatest(1, ceil(CAST((SELECT lim FROM q) AS numeric) / greatest(count(*), 1))) AS integer) AS per,
		count(*) AS groups FROM g),
	r AS (SELECT t.* FROM g CROSS JOIN LATERAL (SELECT * FROM tasks t WHERE t.state IN ` + sqlPending + `
			AND t.priority = g.priority AND t.project = g.project AND t.fairness_key = g.fairness_key
			AND (t.not_before IS NULL OR t.not_before <= now())
			AND (t.scheduling_deadline IS NULL OR t.scheduling_deadline >= now())
		ORDER BY t.id LIMIT (SELECT per FROM k)) t),
	c AS (SELECT max(id) AS last FROM r GROUP BY priority, project, fairness_key HAVING count(*) = (SELECT per FROM k)),
	e AS (SELECT o.* FROM c JOIN r l ON l.id = c.last AND l.coscheduled CROSS JOIN LATERAL (
			SELECT * FROM tasks o WHERE (o.project, o.domain, o.run_name, o.action_name) =
				(l.project, l.domain, l.run_name, l.action_name) OFFSET 0) o
		WHERE o.id > l.id AND o.state IN ` + sqlPending + ` AND (o.not_before IS NULL OR o.not_before <= now())
			AND (o.scheduling_deadline IS NULL OR o.scheduling_deadline >= now())),
	a AS (SELECT * FROM r UNION ALL SELECT * FROM e)
	SELECT (SELECT coalesce(json_agg(a ORDER BY a.priority DESC, a.id), '[]') FROM a) AS tasks, k.per,
		EXISTS (SELECT 1 FROM c) OR k.groups >= (SELECT lim FROM q)
			OR EXISTS (SELECT 1 FROM g WHERE g.nk >= (SELECT keys FROM q)) AS full, k.groups,
		(SELECT coalesce(array_agg(DISTINCT project), '{}') FROM g) AS projects FROM k`

// liveGroupsSQL counts the live tasks (their live attempts, attempts_live)
// of each project of the text[] p.projects and fairness key, as one JSON
// array of {project, fairness_key, live}: as many rows read as tasks run,
// whatever the backlog.
var liveGroupsSQL = `SELECT coalesce(json_agg(u), '[]') FROM (SELECT t.project, t.fairness_key, count(*) AS live
	FROM attempts a CROSS JOIN LATERAL (SELECT project, fairness_key FROM tasks WHERE tasks.id = a.task_id OFFSET 0) t
	WHERE a.state IN ` + sqlLive + ` AND t.project = ANY(p.projects) GROUP BY t.project, t.fairness_key) u`

// PendingRead is what a scheduling pass reads before it decides
// (PendingWork).
type PendingRead struct {
	// Tasks are PENDING placeable tasks, highest band first, then oldest:
	// the oldest PerGroup of each group (band, project, fairness key) that
	// has any, and the rest of a gang one ended in.
	Tasks []Task
	// Workers are the placeable workers with their loads (nil without
	// Tasks).
	Workers []WorkerLoad
	// PerGroup is the most tasks the read took of one group (its gangs
	// completed aside).
	PerGroup int
	// Full is set when the read may have left a placeable task unread.
	Full bool
	// Live counts the live tasks (ASSIGNED, BUILDING, RUNNING) of each
	// project of the read and fairness key, and Weights holds the
	// fair-share weights set of those projects; both are read only when the
	// read found more than one group (else nil).
	Live    map[domain.FairGroup]int
	Weights map[string]int
}

// PendingWork returns the PENDING tasks a scheduling pass places
// (pendingTasksSQL: at most limit groups, keys of them of one project in
// a band) and, when it finds one, the workers PlaceableWorkers (grace)
// returns, and, when it finds more than one group, their projects' live
// tasks and weights, in one statement: what a scheduling pass reads
// before it decides, one round trip. The rows come back as JSON arrays
// (decodeRows), cheaper to decode than gorm's scan column by column; the
// workers are not read when no task is pending: a pass kicked by a run's
// end often finds none. Outside a transaction it runs on the pass's
// connection, whose plans it has made again as the task ids grow
// (replanPass). Errors: Postgres's.
func (s Placement) PendingWork(ctx context.Context, limit, keys int, grace time.Duration) (PendingRead, error) {
	s = Placement{s.prefer(poolPass)}
	var tasks, workers, live, weights []byte
	var out PendingRead
	var groups int
	err := scanRow(s.raw(ctx, `WITH p AS (`+pendingTasksSQL+`)
		SELECT p.tasks, p.per, p.full, CASE WHEN json_array_length(p.tasks) > 0 THEN (
			SELECT coalesce(json_agg(w ORDER BY w.created_at, w.id), '[]') FROM (`+workerLoadsSQL(placeableWhere)+`) w)
		END, p.groups, CASE WHEN p.groups > 1 THEN (`+liveGroupsSQL+`) END,
		CASE WHEN p.groups > 1 THEN (SELECT coalesce(json_object_agg(f.project, f.weight), '{}')
			FROM project_fair_shares f WHERE f.project = ANY(p.projects)) END
		FROM p`, limit, keys, grace.Seconds()),
		&tasks, &out.PerGroup, &out.Full, &workers, &groups, &live, &weights)
	if err != nil {
		return PendingRead{}, mapErr(err)
	}
	if err := decodeRows(tasks, &out.Tasks); err != nil {
		return PendingRead{}, fmt.Errorf("decode pending tasks: %w", err)
	}
	if len(out.Tasks) == 0 {
		return PendingRead{}, nil
	}
	if err := decodeRows(workers, &out.Workers); err != nil {
		return PendingRead{}, fmt.Errorf("decode workers: %w", err)
	}
	if err := decodeStanding(live, weights, &out); err != nil {
		return PendingRead{}, err
	}
	newest := slices.MaxFunc(out.Tasks, func(a, b Task) int { return cmp.Compare(a.ID, b.ID) })
	if _, err := s.replanPass(ctx, newest.ID); err != nil {
		return PendingRead{}, fmt.Errorf("replan: %w", err)
	}
	return out, nil
}

// decodeStanding decodes PendingWork's live counts and weights into out
// (nothing when they were not read).
func decodeStanding(live, weights []byte, out *PendingRead) error {
	if live == nil {
		return nil
	}
	var rows []struct {
		Project     string `json:"project"`
		FairnessKey string `json:"fairness_key"`
		Live        int    `json:"live"`
	}
	if err := decodeRows(live, &rows); err != nil {
		return fmt.Errorf("decode live tasks: %w", err)
	}
	out.Live = make(map[domain.FairGroup]int, len(rows))
	for _, r := range rows {
		out.Live[domain.FairGroup{Project: r.Project, Key: r.FairnessKey}] = r.Live
	}
	if err := decodeRows(weights, &out.Weights); err != nil {
		return fmt.Errorf("decode weights: %w", err)
	}
	return nil
}

// FreshWork returns what placing the PENDING tasks of the named runs needs
// in the transaction that started them (their first advance inserted
// them), in one statement: those tasks, highest priority band first, then
// oldest, and the workers PlaceableWorkers (grace) returns. The workers
// come back (non-nil) only when no other task waits PENDING for a pass
// (placeable now, as pendingTasksSQL reads them) in a band at or above
// the lowest of those tasks': placed first, they would pass over it.
// It also gives the rest of the transaction the by-key pool's planner
// settings (byKeyLocally), for the bind that follows it (AssignTasks): the
// start of a lone run runs on the main pool, whose connections keep a
// generic plan made in a new database's first seconds, when a sequential
// scan of the tasks looked cheapest. Errors: Postgres's.
func (s Placement) FreshWork(ctx context.Context, keys []domain.RunKey, grace time.Duration) ([]Task, []WorkerLoad, error) {
	projects, domains, names := runKeyArrays(keys)
	var tasks, workers []byte
	err := scanRow(s.raw(ctx, `WITH k AS (SELECT * FROM unnest(CAST(CAST(? AS text) AS text[]), CAST(CAST(? AS text) AS text[]),
			CAST(CAST(? AS text) AS text[])) AS k(project, domain, run_name)),
		m AS (SELECT t.* FROM tasks t JOIN k ON (t.project, t.domain, t.run_name) = (k.project, k.domain, k.run_name)
			WHERE t.state IN `+sqlPending+`)
		SELECT (SELECT coalesce(json_agg(m ORDER BY m.priority DESC, m.id), '[]') FROM m),
			CASE WHEN EXISTS (SELECT 1 FROM m) AND NOT EXISTS (SELECT 1 FROM tasks o WHERE o.state IN `+sqlPending+`
				AND o.priority >= (SELECT min(priority) FROM m)
				AND (o.not_before IS NULL OR o.not_before <= now())
				AND (o.scheduling_deadline IS NULL OR o.scheduling_deadline >= now())
				AND (o.project, o.domain, o.run_name) NOT IN (SELECT project, domain, run_name FROM k))
			THEN (SELECT coalesce(json_agg(w ORDER BY w.created_at, w.id), '[]') FROM (`+workerLoadsSQL(placeableWhere)+`) w)
			END
		FROM (SELECT `+byKeyLocally+`) s`, projects, domains, names, grace.Seconds()), &tasks, &workers)

	if err != nil {
		return nil, nil, mapErr(err)
	}
	var ts []Task
	if err := decodeRows(tasks, &ts); err != nil {
		return nil, nil, fmt.Errorf("decode fresh tasks: %w", err)
	}
	if workers == nil {
		return ts, nil, nil
	}
	ws := []WorkerLoad{}
	if err := decodeRows(workers, &ws); err != nil {
		return nil, nil, fmt.Errorf("decode workers: %w", err)
	}
	return ts, ws, nil
}

// SetPendingReasons records why PENDING tasks cannot be placed (task id →
// reason), and moves their QUEUED actions to WAITING_FOR_RESOURCES with an
// "action.phase" event each. Tasks no longer PENDING are left alone; an
// unchanged reason is not rewritten. Actions are locked before tasks.
//
// Its reads of tasks go by key (pendingReasonChangedSQL): the pass's
// connection keeps one plan of each statement, and one that could also
// read the PENDING tasks' partial indexes would take them, estimated at a
// few rows when the table was not analyzed since it filled, and match
// every PENDING task against the list.
func (s Placement) SetPendingReasons(ctx context.Context, reasons map[int64]string) error {
	s = Placement{s.prefer(poolPass)}
	byReason := map[string][]int64{}
	for id, r := range reasons {
		byReason[r] = append(byReason[r], id)
	}
	for reason, ids := range byReason {
		var changed []int64
		if err := s.raw(ctx, pendingReasonChangedSQL, map[string]any{"ids": array(ids),
			"pending": domain.TaskPending, "reason": reason}).Scan(&changed).Error; err != nil {
			return mapErr(err)
		}
		if len(changed) == 0 {
			continue
		}
		if err := s.inTx(ctx, func(tx *Store) error { return tx.setPendingReason(ctx, changed, reason) }); err != nil {
			return err
		}
	}
	return nil
}

// setPendingReason is SetPendingReasons for the tasks of ids, of one
// reason, in a transaction. It locks only their actions still QUEUED, the
// ones it moves: a RUNNING action's row is locked by every evaluation of
// its tasks, and under a backlog of one step a pass waited on them.
func (s *core) setPendingReason(ctx context.Context, ids []int64, reason string) error {
	if err := s.actions().LockTaskActions(ctx, ids, domain.PhaseQueued); err != nil {
		return err
	}
	var moved []Action
	if err := s.raw(ctx, `UPDATE actions a SET phase = ?, updated_at = now(), version = a.version + 1
		FROM (SELECT DISTINCT project, domain, run_name, action_name FROM tasks WHERE id IN ?) k
		WHERE (a.project, a.domain, a.run_name, a.name) = (k.project, k.domain, k.run_name, k.action_name) AND a.phase = ?
		RETURNING a.project, a.domain, a.run_name, a.name`, string(domain.PhaseWaitingForResources), ids,
		string(domain.PhaseQueued)).Scan(&moved).Error; err != nil {
		return mapErr(err)
	}
	for _, a := range moved {
		key := domain.RunKey{Project: a.Project, Domain: a.Domain, Run: a.RunName}
		if err := s.event(ctx, key, a.Name, "action.phase", map[string]any{"from": domain.PhaseQueued,
			"to": domain.PhaseWaitingForResources, "reason": reason}); err != nil {
			return err
		}
	}
	return mapErr(s.exec(ctx, setPendingReasonSQL, map[string]any{"ids": array(ids),
		"pending": domain.TaskPending, "reason": reason, "now": time.Now().UTC()}).Error)
}

// pendingReasonChangedSQL returns the ids of @ids that are PENDING with
// another reason than @reason. The tasks are read by key first (the CTE
// has no condition on state, so no partial index of PENDING tasks can
// serve it), then filtered.
const pendingReasonChangedSQL = `WITH c AS MATERIALIZED (
	SELECT id, state, pending_reason FROM tasks WHERE id = ANY(CAST(@ids AS bigint[])))
SELECT id FROM c WHERE state = @pending AND pending_reason IS DISTINCT FROM @reason ORDER BY id`

// setPendingReasonSQL writes @reason on the tasks of @ids still PENDING:
// it locks them by key in id order (the lock order), and filters on the
// state as locked (their latest versions), so, as in
// pendingReasonChangedSQL, no partial index of PENDING tasks can serve it.
const setPendingReasonSQL = `WITH c AS MATERIALIZED (
	SELECT id, state FROM tasks WHERE id = ANY(CAST(@ids AS bigint[])) ORDER BY id FOR NO KEY UPDATE)
UPDATE tasks t SET pending_reason = @reason, updated_at = @now FROM c WHERE t.id = c.id AND c.state = @pending`

// Assignment binds one PENDING task to a worker.
type Assignment struct {
	TaskID   int64
	WorkerID string
}

// Assigned is an attempt AssignTasks created, with what an executor needs to
// run it beyond the attempt's row: its task's action and index, and its
// step's spec (as the action held it when the statement began).
type Assigned struct {
	Attempt
	Project    string
	Domain     string
	RunName    string
	ActionName string
	TaskIdx    int `gorm:"column:task_idx"`
	// TaskItem is a for_each task's item; nil for a replica.
	TaskItem *string     `gorm:"column:task_item"`
	Step     domain.Step `gorm:"column:step;serializer:json"`
	// FromPhase is the action's phase before the bind: it moved to
	// RUNNING when that was QUEUED, WAITING_FOR_RESOURCES or WAITING.
	FromPhase domain.Phase `gorm:"column:from_phase"`
}

// Action is the key of a's action.
func (a Assigned) Action() domain.ActionKey {
	return domain.RunKey{Project: a.Project, Domain: a.Domain, Run: a.RunName}.Action(a.ActionName)
}

// AssignTasks binds PENDING tasks to workers in one statement
// (assignTasksSQL): it locks the tasks' actions still QUEUED,
// WAITING_FOR_RESOURCES or WAITING (key order), then each task still
// PENDING (id order), which becomes ASSIGNED to its worker with a new
// attempt (ASSIGNED); its action moves from QUEUED, WAITING_FOR_RESOURCES
// or WAITING (a waiting step's next check) to RUNNING. A task no longer PENDING (aborted, or assigned by another pass)
// is left alone. It returns the attempts created, by id, each with its
// task's action and index and its step, and appends their events to the
// transaction's, after those it holds: task.assigned for each attempt, by
// id, then action.phase for each action it moved. Outside a transaction
// it runs in one of its own, on the pass's connection (poolPass). A
// scheduling pass binds all its tasks this way, and so does a fresh run's
// start (the tasks it inserted, whose locks it holds). Errors: Postgres's.
func (s Placement) AssignTasks(ctx context.Context, as []Assignment) ([]Assigned, error) {
	if len(as) == 0 {
		return nil, nil
	}
	if s.tx == nil {
		var out []Assigned
		err := s.prefer(poolPass).inTx(ctx, func(tx *Store) error {
			var err error
			out, err = tx.placement().AssignTasks(ctx, as)
			return err
		})
		return out, err
	}
	ids, workers := make([]int64, len(as)), make([]string, len(as))
	for i, a := range as {
		ids[i], workers[i] = a.TaskID, a.WorkerID
	}
	var out []Assigned
	err := s.raw(ctx, assignTasksSQL, map[string]any{
		"ids": array(ids), "workers": array(workers),
		"now": time.Now().UTC(), "pending": domain.TaskPending, "assigned": domain.TaskAssigned,
		"running": string(domain.PhaseRunning), "waiting": []string{string(domain.PhaseQueued),
			string(domain.PhaseWaitingForResources), string(domain.PhaseWaiting)},
	}).Scan(&out).Error
	if err != nil {
		return nil, mapErr(err)
	}
	return out, s.assignedEvents(ctx, out)
}

// assignedEvents appends the events of the attempts AssignTasks created
// (see there) to the transaction's.
func (s Placement) assignedEvents(ctx context.Context, out []Assigned) error {
	from := map[domain.ActionKey]domain.Phase{}
	var moved []domain.ActionKey
	for _, a := range out {
		t := Task{ID: a.TaskID, Project: a.Project, Domain: a.Domain, RunName: a.RunName, ActionName: a.ActionName}
		if err := s.taskEvent(ctx, t, a.ID, "task.assigned", map[string]any{"worker_id": a.WorkerID}); err != nil {
			return err
		}
		k := a.Action()
		if _, ok := from[k]; !ok && assignMoves(a.FromPhase) {
			from[k] = a.FromPhase
			moved = append(moved, k)
		}
	}
	for _, k := range moved {
		if err := s.event(ctx, k.RunKey, k.Action, "action.phase",
			map[string]any{"from": from[k], "to": domain.PhaseRunning}); err != nil {
			return err
		}
	}
	return nil
}

// assignMoves reports whether binding a task moves its action from phase
// to RUNNING (assignTasksSQL's @waiting).
func assignMoves(phase domain.Phase) bool {
	return phase == domain.PhaseQueued || phase == domain.PhaseWaitingForResources || phase == domain.PhaseWaiting
}

// assignTasksSQL is AssignTasks' statement. Its data-modifying parts run to
// completion whatever the final SELECT reads, in one snapshot. The lock
// order holds within it: the only actions it updates, and so locks, are
// those still QUEUED, WAITING_FOR_RESOURCES or WAITING, and `acts` locks
// them first: `locked` reads the count of `acts` in its filter, an uncorrelated subquery
// Postgres runs once as a one-time filter before the first task row is read
// (EXPLAIN shows it), and `locked`'s rows are sorted before they are locked.
// A RUNNING action is not locked at all, so a pass never waits for an
// evaluation in progress on a running step. The final SELECT returns the
// attempts, each with its action and step as the statement began
// (from_phase: the phase it moved from). Reads tasks, actions; locks and
// writes the tasks and actions it binds; inserts attempts.
const assignTasksSQL = `
WITH v AS (
	SELECT * FROM unnest(CAST(@ids AS bigint[]), CAST(@workers AS uuid[])) AS v(task_id, worker_id)
), acts AS (
	SELECT 1 FROM actions a WHERE (a.project, a.domain, a.run_name, a.name) IN
		(SELECT t.project, t.domain, t.run_name, t.action_name FROM tasks t JOIN v ON v.task_id = t.id)
		AND a.phase IN @waiting
	ORDER BY a.project, a.domain, a.run_name, a.name FOR NO KEY UPDATE OF a
), locked AS (
	SELECT t.id FROM tasks t JOIN v ON v.task_id = t.id
	WHERE t.state = @pending AND (SELECT count(*) FROM acts) >= 0 ORDER BY t.id FOR UPDATE OF t
), t AS (
	UPDATE tasks t SET state = @assigned, worker_id = v.worker_id, pending_reason = NULL,
		attempt_count = t.attempt_count + 1, updated_at = @now, version = t.version + 1
	FROM v JOIN locked ON locked.id = v.task_id WHERE t.id = v.task_id
	RETURNING t.id, t.idx, t.project, t.domain, t.run_name, t.action_name, t.attempt_count, t.worker_id, t.item
), a AS (
	INSERT INTO attempts (task_id, number, worker_id, state, created_at, updated_at)
	SELECT id, attempt_count, worker_id, @assigned, @now, @now FROM t
	RETURNING *
), act AS (
	UPDATE actions x SET phase = @running, updated_at = @now, version = x.version + 1
	FROM (SELECT DISTINCT project, domain, run_name, action_name FROM t) k
	WHERE x.project = k.project AND x.domain = k.domain AND x.run_name = k.run_name AND x.name = k.action_name
		AND x.phase IN @waiting
)
SELECT a.*, t.project, t.domain, t.run_name, t.action_name, t.idx AS task_idx, t.item AS task_item, x.spec AS step,
	x.phase AS from_phase
FROM a JOIN t ON t.id = a.task_id
	JOIN actions x ON (x.project, x.domain, x.run_name, x.name) = (t.project, t.domain, t.run_name, t.action_name)
ORDER BY a.id`

// LiveOnWorker is a live attempt of a worker, for preemption.
type LiveOnWorker struct {
	AttemptID   int64
	WorkerID    string
	State       domain.TaskState
	Priority    int16
	CPUMillis   int64 `gorm:"column:cpu_millis"`
	MemoryBytes int64
}

// LiveOnWorkers returns the live attempts held by the given workers with
// their tasks' bands and resources.
func (s Placement) LiveOnWorkers(ctx context.Context, workerIDs []string) ([]LiveOnWorker, error) {
	s = Placement{s.prefer(poolPass)}
	if len(workerIDs) == 0 {
		return nil, nil
	}
	var out []LiveOnWorker
	err := s.raw(ctx, `SELECT a.id AS attempt_id, a.worker_id, a.state, t.priority, t.cpu_millis, t.memory_bytes
		FROM attempts a JOIN tasks t ON t.id = a.task_id
		WHERE a.worker_id IN ? AND a.state IN `+sqlLive+` ORDER BY a.id`, workerIDs).Scan(&out).Error
	return out, mapErr(err)
}
