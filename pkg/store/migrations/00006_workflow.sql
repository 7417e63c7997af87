-- +goose Up
-- KubeVela's workflow semantics: waits (a suspend's duration, an approval, a
-- resume, a retry's backoff), step retries as new generations of tasks,
-- restarts, run and step timeouts, and outputs passed between steps.
ALTER TABLE runs
    ADD COLUMN timeout_ms           bigint NOT NULL DEFAULT 0,
    ADD COLUMN suspend_requested_at timestamptz,
    ADD COLUMN resume_requested_at  timestamptz,
    ADD COLUMN restart_requested_at timestamptz,
    ADD COLUMN restart_from         text;
CREATE INDEX runs_timeout ON runs (created_at) WHERE timeout_ms > 0 AND ended_at IS NULL;
CREATE INDEX runs_restart ON runs (restart_requested_at) WHERE restart_requested_at IS NOT NULL;

ALTER TABLE actions
    ADD COLUMN generation       integer NOT NULL DEFAULT 0,
    ADD COLUMN timeout_ms       bigint  NOT NULL DEFAULT 0,
    ADD COLUMN waiting_for      text,
    ADD COLUMN paused_at        timestamptz,
    ADD COLUMN reason           text,
    ADD COLUMN decision         text,
    ADD COLUMN decided_by       text,
    ADD COLUMN decided_at       timestamptz,
    ADD COLUMN decision_comment text;
-- Steps waiting for a time (a suspend's duration, a retry's backoff).
CREATE INDEX actions_waiting ON actions (not_before) WHERE waiting_for IS NOT NULL;
-- Started steps with a timeout that have not ended.
CREATE INDEX actions_timeout ON actions (started_at) WHERE timeout_ms > 0 AND ended_at IS NULL;

ALTER TABLE tasks ADD COLUMN generation integer NOT NULL DEFAULT 0;
ALTER TABLE tasks DROP CONSTRAINT tasks_project_domain_run_name_action_name_idx_key;
ALTER TABLE tasks ADD CONSTRAINT tasks_action_generation_idx
    UNIQUE (project, domain, run_name, action_name, generation, idx);

ALTER TABLE attempts ADD COLUMN outputs jsonb;

-- +goose Down
ALTER TABLE attempts DROP COLUMN outputs;
ALTER TABLE tasks DROP CONSTRAINT tasks_action_generation_idx;
DELETE FROM tasks WHERE generation > 0;
ALTER TABLE tasks ADD CONSTRAINT tasks_project_domain_run_name_action_name_idx_key
    UNIQUE (project, domain, run_name, action_name, idx);
ALTER TABLE tasks DROP COLUMN generation;
DROP INDEX actions_timeout;
DROP INDEX actions_waiting;
ALTER TABLE actions DROP COLUMN generation, DROP COLUMN timeout_ms, DROP COLUMN waiting_for,
    DROP COLUMN paused_at, DROP COLUMN reason, DROP COLUMN decision, DROP COLUMN decided_by,
    DROP COLUMN decided_at, DROP COLUMN decision_comment;
DROP INDEX runs_restart;
DROP INDEX runs_timeout;
ALTER TABLE runs DROP COLUMN timeout_ms, DROP COLUMN suspend_requested_at, DROP COLUMN resume_requested_at,
    DROP COLUMN restart_requested_at, DROP COLUMN restart_from;
