WITH g AS (
  SELECT $3 || i AS name, CAST($6 AS timestamptz) + (i - $4) * make_interval(secs => $7) AS at
  FROM generate_series(CAST($4 AS bigint), CAST($5 AS bigint)) i),
r AS (INSERT INTO runs (project, domain, name, spec, phase, version, created_at, updated_at, ended_at,
    ttl_success_ms, ttl_failure_ms, expires_at)
  SELECT $1, $2, name, CAST($9 AS jsonb), 'SUCCEEDED', 3, at, at + make_interval(secs => $8), at + make_interval(secs => $8),
    CAST($10 AS bigint), CAST($10 AS bigint), at + make_interval(secs => $8) + make_interval(secs => CAST($10 AS bigint) / 1000.0)
  FROM g),
x AS (INSERT INTO actions (project, domain, run_name, name, parent_action_name, kind, spec, phase, version,
    created_at, updated_at, started_at, ended_at)
  SELECT $1, $2, g.name, a.name, a.parent, a.kind, CAST(a.spec AS jsonb), 'SUCCEEDED', 3, g.at,
    g.at + make_interval(secs => $8), CASE WHEN a.name = 's' THEN g.at END, g.at + make_interval(secs => $8)
  FROM g, (VALUES ('a0', NULL, 'workflow', '{"name": ""}'),
    ('s', 'a0', 'task', '{"kind": "task", "name": "s", "plugin": "noop", "priority": "interactive"}')) a(name, parent, kind, spec)),
t AS (INSERT INTO tasks (project, domain, run_name, action_name, idx, plugin, state, worker_id, attempt_count, version,
    created_at, updated_at, ended_at)
  SELECT $1, $2, name, 's', 0, 'noop', 4, '00000000-0000-4000-8000-000000000001', 1, 4, at,
    at + make_interval(secs => $8), at + make_interval(secs => $8)
  FROM g RETURNING id, run_name, created_at, ended_at),
a AS (INSERT INTO attempts (task_id, number, worker_id, state, exit_code, created_at, updated_at, started_at,
    finished_at, evaluated_at)
  SELECT id, 1, '00000000-0000-4000-8000-000000000001', 4, 0, created_at, ended_at, created_at, ended_at, ended_at
  FROM t RETURNING id, task_id)
INSERT INTO run_events (project, domain, run_name, action_name, task_id, attempt_id, type, data, created_at)
SELECT $1, $2, t.run_name, e.action, CASE WHEN e.task THEN t.id END, CASE WHEN e.attempt THEN a.id END, e.type,
  CAST(e.data AS jsonb), t.created_at + e.ord * make_interval(secs => $8) / 11
FROM t JOIN a ON a.task_id = t.id, (VALUES
  (0, 'a0', 'run.created', '{"phase": "QUEUED"}', false, false),
  (1, 'a0', 'run.expanded', '{"steps": 1}', false, false),
  (2, 's', 'action.started', '{"tasks": 1}', false, false),
  (3, 's', 'task.assigned', '{"worker_id": "00000000-0000-4000-8000-000000000001"}', true, true),
  (4, 's', 'action.phase', '{"to": "RUNNING", "from": "QUEUED"}', false, false),
  (5, 'a0', 'action.phase', '{"to": "RUNNING", "from": "QUEUED"}', false, false),
  (6, 's', 'attempt.RUNNING', '{"cause": "", "error": "", "exit_code": null}', true, true),
  (7, 's', 'attempt.SUCCEEDED', '{"cause": "", "error": "", "exit_code": 0}', true, true),
  (8, 's', 'task.NO_RETRY', '{"not_before": null, "attempt_state": "SUCCEEDED"}', true, true),
  (9, 's', 'action.phase', '{"to": "SUCCEEDED", "from": "RUNNING"}', false, false),
  (10, 'a0', 'action.phase', '{"to": "SUCCEEDED", "from": "RUNNING"}', false, false)) e(ord, action, type, data, task, attempt)
ORDER BY t.id, e.ord
