-- +goose Up
CREATE TABLE runs (
    project         text        NOT NULL,
    domain          text        NOT NULL,
    name            text        NOT NULL,
    spec            jsonb       NOT NULL,
    phase           text        NOT NULL DEFAULT 'QUEUED',
    idempotency_key text,
    version         bigint      NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    ended_at        timestamptz,
    PRIMARY KEY (project, domain, name)
);
CREATE UNIQUE INDEX runs_idempotency_key ON runs (project, domain, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_list ON runs (project, domain, created_at DESC, name DESC);
CREATE INDEX runs_active ON runs (created_at) WHERE ended_at IS NULL;

CREATE TABLE actions (
    project             text        NOT NULL,
    domain              text        NOT NULL,
    run_name            text        NOT NULL,
    name                text        NOT NULL,
    parent_action_name  text,
    kind                text        NOT NULL,
    spec                jsonb       NOT NULL DEFAULT '{}',
    depends_on          text[]      NOT NULL DEFAULT '{}',
    phase               text        NOT NULL DEFAULT 'QUEUED',
    abort_requested_at  timestamptz,
    abort_attempt_count integer     NOT NULL DEFAULT 0,
    abort_reason        text,
    abort_outcome       text,
    failed_times        integer     NOT NULL DEFAULT 0,
    not_before          timestamptz,
    version             bigint      NOT NULL DEFAULT 1,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    ended_at            timestamptz,
    PRIMARY KEY (project, domain, run_name, name),
    FOREIGN KEY (project, domain, run_name) REFERENCES runs ON DELETE CASCADE
);
CREATE INDEX actions_pending_aborts ON actions (abort_requested_at) WHERE abort_requested_at IS NOT NULL;

CREATE TABLE tasks (
    id                     bigserial   PRIMARY KEY,
    project                text        NOT NULL,
    domain                 text        NOT NULL,
    run_name               text        NOT NULL,
    action_name            text        NOT NULL,
    idx                    integer     NOT NULL,
    state                  smallint    NOT NULL DEFAULT 1,
    failure_count          integer     NOT NULL DEFAULT 0,
    max_retries_failure    integer     NOT NULL DEFAULT 0,
    preemption_count       integer     NOT NULL DEFAULT 0,
    max_retries_preemption integer     NOT NULL DEFAULT 100,
    system_failure_count   integer     NOT NULL DEFAULT 0,
    max_system_failures    integer     NOT NULL DEFAULT 3,
    attempt_count          integer     NOT NULL DEFAULT 0,
    worker_id              uuid,
    pending_reason         text,
    not_before             timestamptz,
    scheduling_deadline    timestamptz,
    version                bigint      NOT NULL DEFAULT 1,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    ended_at               timestamptz,
    UNIQUE (project, domain, run_name, action_name, idx),
    FOREIGN KEY (project, domain, run_name, action_name) REFERENCES actions ON DELETE CASCADE
);
CREATE INDEX tasks_pending ON tasks (not_before NULLS FIRST, id) WHERE state = 1;
CREATE INDEX tasks_worker ON tasks (worker_id) WHERE worker_id IS NOT NULL;

CREATE TABLE attempts (
    id           bigserial   PRIMARY KEY,
    task_id      bigint      NOT NULL REFERENCES tasks ON DELETE CASCADE,
    number       integer     NOT NULL,
    worker_id    uuid,
    state        smallint    NOT NULL,
    exit_code    integer,
    error        text,
    cause        text,
    pid          integer,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz,
    evaluated_at timestamptz,
    UNIQUE (task_id, number)
);
-- Live attempts (ASSIGNED 9, BUILDING 2, RUNNING 3), by worker.
CREATE INDEX attempts_live ON attempts (worker_id) WHERE state IN (2, 3, 9);
-- Finished attempts whose outcome the scheduler has not applied yet.
CREATE INDEX attempts_unevaluated ON attempts (id) WHERE finished_at IS NOT NULL AND evaluated_at IS NULL;

CREATE TABLE attempt_logs (
    attempt_id bigint      PRIMARY KEY REFERENCES attempts ON DELETE CASCADE,
    stdout     text        NOT NULL DEFAULT '',
    stderr     text        NOT NULL DEFAULT '',
    truncated  boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE workers (
    id                uuid        PRIMARY KEY,
    name              text        NOT NULL,
    address           text        NOT NULL,
    slots             integer     NOT NULL,
    labels            jsonb       NOT NULL DEFAULT '{}',
    failures          jsonb       NOT NULL DEFAULT '{}',
    state             text        NOT NULL DEFAULT 'alive',
    version           bigint      NOT NULL DEFAULT 1,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    last_heartbeat_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE run_events (
    id          bigserial   PRIMARY KEY,
    project     text        NOT NULL,
    domain      text        NOT NULL,
    run_name    text        NOT NULL,
    action_name text,
    task_id     bigint,
    attempt_id  bigint,
    type        text        NOT NULL,
    data        jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_events_run ON run_events (project, domain, run_name, id);

-- +goose Down
DROP TABLE run_events;
DROP TABLE workers;
DROP TABLE attempt_logs;
DROP TABLE attempts;
DROP TABLE tasks;
DROP TABLE actions;
DROP TABLE runs;
