package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Assignment binds one PENDING task to a worker.
type Assignment struct {
	TaskID   int64
	WorkerID string
}

// AssignTasks does what AssignTask does for each assignment, in one
// statement: each task still PENDING becomes ASSIGNED to its worker with a
// new attempt (ASSIGNED), its action moves from QUEUED or
// WAITING_FOR_RESOURCES to RUNNING, and a task.assigned event is written. A
// task no longer PENDING (aborted, or assigned by another pass) is left
// alone. It returns the attempts created, by id; their tasks are locked in id
// order. A scheduling pass binds all its tasks this way: the cost of a pass
// is then a few statements, not a transaction per task.
func (s *Store) AssignTasks(ctx context.Context, as []Assignment) ([]Attempt, error) {
	if len(as) == 0 {
		return nil, nil
	}
	ids := make([]string, len(as))
	workers := make([]string, len(as))
	for i, a := range as {
		ids[i], workers[i] = strconv.FormatInt(a.TaskID, 10), a.WorkerID
	}
	var out []Attempt
	err := s.q(ctx).Raw(assignTasksSQL, map[string]any{
		"ids": "{" + strings.Join(ids, ",") + "}", "workers": "{" + strings.Join(workers, ",") + "}",
		"now": time.Now().UTC(), "pending": int16(domain.TaskPending), "assigned": int16(domain.TaskAssigned),
		"running": string(domain.PhaseRunning), "waiting": []string{string(domain.PhaseQueued),
			string(domain.PhaseWaitingForResources)},
	}).Scan(&out).Error
	return out, mapErr(err)
}

// assignTasksSQL is AssignTasks' statement. Its data-modifying parts run to
// completion whatever the final SELECT reads, in one snapshot.
const assignTasksSQL = `
WITH v AS (
	SELECT * FROM unnest(CAST(@ids AS bigint[]), CAST(@workers AS uuid[])) AS v(task_id, worker_id)
), locked AS (
	SELECT t.id FROM tasks t JOIN v ON v.task_id = t.id WHERE t.state = @pending ORDER BY t.id FOR UPDATE OF t
), t AS (
	UPDATE tasks t SET state = @assigned, worker_id = v.worker_id, pending_reason = NULL,
		attempt_count = t.attempt_count + 1, updated_at = @now, version = t.version + 1
	FROM v JOIN locked ON locked.id = v.task_id WHERE t.id = v.task_id
	RETURNING t.id, t.project, t.domain, t.run_name, t.action_name, t.attempt_count, t.worker_id
), a AS (
	INSERT INTO attempts (task_id, number, worker_id, state, created_at, updated_at)
	SELECT id, attempt_count, worker_id, @assigned, @now, @now FROM t
	RETURNING *
), act AS (
	UPDATE actions x SET phase = @running, updated_at = @now, version = x.version + 1
	FROM (SELECT DISTINCT project, domain, run_name, action_name FROM t) k
	WHERE x.project = k.project AND x.domain = k.domain AND x.run_name = k.run_name AND x.name = k.action_name
		AND x.phase IN @waiting
), ev AS (
	INSERT INTO run_events (project, domain, run_name, action_name, task_id, attempt_id, type, data, created_at)
	SELECT t.project, t.domain, t.run_name, t.action_name, t.id, a.id, 'task.assigned',
		jsonb_build_object('worker_id', a.worker_id), @now
	FROM a JOIN t ON t.id = a.task_id
)
SELECT * FROM a ORDER BY id`
