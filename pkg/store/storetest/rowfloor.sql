-- The row floor of a single-task run: the rows and index entries a single-step
-- noop run writes when nothing waits (1 run, 2 actions, 1 task, 1 attempt and
-- 11 events inserted; 2 run, 4 action, 3 task and 2 attempt updates), for :k
-- runs at a time, in one transaction and the fewest statements, with no read
-- or decision around them. A pgbench script (pgbench -f rowfloor.sql -D k=10):
-- what Postgres alone needs to record runs, whatever computes them.
-- TestRowFloorWritesWhatARunWrites holds it to what the scheduler and the
-- store write for one run.
SELECT nextval('tasks_id_seq') * 100 AS b \gset
BEGIN;
-- The create: the run, its root action and run.created.
INSERT INTO runs (project, domain, name, spec) SELECT 'p', 'd', 'f' || (:b + g), '{"mode": "StepByStep", "steps": [{"kind": "task", "name": "s", "plugin": "noop", "priority": "interactive"}]}' FROM generate_series(0, :k - 1) g;
INSERT INTO actions (project, domain, run_name, name, kind, spec) SELECT 'p', 'd', 'f' || (:b + g), 'a0', 'workflow', '{"name": ""}' FROM generate_series(0, :k - 1) g;
INSERT INTO run_events (project, domain, run_name, action_name, type, data) SELECT 'p', 'd', 'f' || (:b + g), 'a0', 'run.created', '{"phase": "QUEUED"}' FROM generate_series(0, :k - 1) g;
-- The start: the step and its task.
INSERT INTO actions (project, domain, run_name, name, parent_action_name, kind, spec, started_at) SELECT 'p', 'd', 'f' || (:b + g), 's', 'a0', 'task', '{"kind": "task", "name": "s", "plugin": "noop", "priority": "interactive"}', now() FROM generate_series(0, :k - 1) g;
INSERT INTO tasks (project, domain, run_name, action_name, idx, plugin) SELECT 'p', 'd', 'f' || (:b + g), 's', 0, 'noop' FROM generate_series(0, :k - 1) g;
INSERT INTO run_events (project, domain, run_name, action_name, type, data) SELECT 'p', 'd', 'f' || (:b + g), e.action, e.type, CAST(e.data AS jsonb) FROM generate_series(0, :k - 1) g, (VALUES ('a0', 'run.expanded', '{"steps": 1}'), ('s', 'action.started', '{"tasks": 1}')) e(action, type, data);
-- Its placement, in the same transaction: the task ASSIGNED with its attempt, the step RUNNING.
WITH t AS (UPDATE tasks SET state = 9, worker_id = '00000000-0000-4000-8000-000000000001', attempt_count = attempt_count + 1, updated_at = now(), version = version + 1 WHERE project = 'p' AND domain = 'd' AND run_name IN (SELECT 'f' || (:b + g) FROM generate_series(0, :k - 1) g) AND action_name = 's' RETURNING id, run_name, worker_id),
a AS (INSERT INTO attempts (task_id, number, worker_id, state) SELECT id, 1, worker_id, 9 FROM t RETURNING id, task_id)
INSERT INTO run_events (project, domain, run_name, action_name, task_id, attempt_id, type, data) SELECT 'p', 'd', t.run_name, 's', t.id, a.id, 'task.assigned', jsonb_build_object('worker_id', t.worker_id) FROM t JOIN a ON a.task_id = t.id;
UPDATE actions SET phase = 'RUNNING', updated_at = now(), version = version + 1 WHERE project = 'p' AND domain = 'd' AND run_name IN (SELECT 'f' || (:b + g) FROM generate_series(0, :k - 1) g) AND name = 's';
INSERT INTO run_events (project, domain, run_name, action_name, type, data) SELECT 'p', 'd', 'f' || (:b + g), 's', 'action.phase', '{"to": "RUNNING", "from": "QUEUED"}' FROM generate_series(0, :k - 1) g;
-- Its root moves: the root and the run RUNNING.
UPDATE actions SET phase = 'RUNNING', updated_at = now(), version = version + 1 WHERE project = 'p' AND domain = 'd' AND run_name IN (SELECT 'f' || (:b + g) FROM generate_series(0, :k - 1) g) AND name = 'a0';
UPDATE runs SET phase = 'RUNNING', updated_at = now(), version = version + 1 WHERE project = 'p' AND domain = 'd' AND name IN (SELECT 'f' || (:b + g) FROM generate_series(0, :k - 1) g);
INSERT INTO run_events (project, domain, run_name, action_name, type, data) SELECT 'p', 'd', 'f' || (:b + g), 'a0', 'action.phase', '{"to": "RUNNING", "from": "QUEUED"}' FROM generate_series(0, :k - 1) g;
-- The report: RUNNING and SUCCEEDED in one batch, the task with them.
WITH a AS (UPDATE attempts a SET state = 4, exit_code = 0, started_at = now(), finished_at = now(), updated_at = now() FROM tasks t WHERE t.id = a.task_id AND t.project = 'p' AND t.domain = 'd' AND t.run_name IN (SELECT 'f' || (:b + g) FROM generate_series(0, :k - 1) g) RETURNING a.id, a.task_id, t.run_name)
INSERT INTO run_events (project, domain, run_name, action_name, task_id, attempt_id, type, data) SELECT 'p', 'd', a.run_name, 's', a.task_id, a.id, e.type, CAST(e.data AS jsonb) FROM a, (VALUES ('attempt.RUNNING', '{"cause": "", "error": "", "exit_code": null}'), ('attempt.SUCCEEDED', '{"cause": "", "error": "", "exit_code": 0}')) e(type, data);
UPDATE tasks SET state = 3, updated_at = now(), version = version + 1 WHERE project = 'p' AND domain = 'd' AND run_name IN (SELECT 'f' || (:b + g) FROM generate_series(0, :k - 1) g) AND action_name = 's';
-- The evaluation: the attempt evaluated, the task, the step, the root and the run SUCCEEDED.
UPDATE attempts a SET evaluated_at = now() FROM tasks t WHERE t.id = a.task_id AND t.project = 'p' AND t.domain = 'd' AND t.run_name IN (SELECT 'f' || (:b + g) FROM generate_series(0, :k - 1) g);
WITH t AS (UPDATE tasks SET state = 4, ended_at = now(), updated_at = now(), version = version + 1 WHERE project = 'p' AND domain = 'd' AND run_name IN (SELECT 'f' || (:b + g) FROM generate_series(0, :k - 1) g) AND action_name = 's' RETURNING id, run_name)
INSERT INTO run_events (project, domain, run_name, action_name, task_id, attempt_id, type, data) SELECT 'p', 'd', t.run_name, 's', t.id, a.id, 'task.NO_RETRY', '{"not_before": null, "attempt_state": "SUCCEEDED"}' FROM t JOIN attempts a ON a.task_id = t.id;
UPDATE actions SET phase = 'SUCCEEDED', ended_at = now(), updated_at = now(), version = version + 1 WHERE project = 'p' AND domain = 'd' AND run_name IN (SELECT 'f' || (:b + g) FROM generate_series(0, :k - 1) g);
UPDATE runs SET phase = 'SUCCEEDED', ended_at = now(), updated_at = now(), version = version + 1 WHERE project = 'p' AND domain = 'd' AND name IN (SELECT 'f' || (:b + g) FROM generate_series(0, :k - 1) g);
INSERT INTO run_events (project, domain, run_name, action_name, type, data) SELECT 'p', 'd', 'f' || (:b + g), e.action, 'action.phase', '{"to": "SUCCEEDED", "from": "RUNNING"}' FROM generate_series(0, :k - 1) g, (VALUES ('s'), ('a0')) e(action);
COMMIT;
