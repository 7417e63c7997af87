-- +goose Up
-- Workflow templates: one immutable row per version. digest is the SHA-256
-- of the version's canonical body (description, params, spec): a push equal
-- to the latest version's is that version. deleted_at, set on every version
-- of a name at once, stops new runs of it; a later push of the name is the
-- next version.
CREATE TABLE workflow_templates (
    project text NOT NULL,
    domain text NOT NULL,
    name text NOT NULL,
    version integer NOT NULL CHECK (version > 0),
    description text NOT NULL DEFAULT '',
    params jsonb NOT NULL DEFAULT '[]',
    spec jsonb NOT NULL,
    digest text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz,
    PRIMARY KEY (project, domain, name, version)
);

-- A run's origin: the template version it runs (with its resolved params),
-- the schedule and scheduled time, or the trigger and published event.
ALTER TABLE runs
    ADD COLUMN workflow_name text,
    ADD COLUMN workflow_version integer,
    ADD COLUMN params jsonb,
    ADD COLUMN schedule_name text,
    ADD COLUMN scheduled_at timestamptz,
    ADD COLUMN trigger_name text,
    ADD COLUMN event_id text;
-- A schedule's runs by time, newest first: its recent runs.
CREATE INDEX runs_by_schedule ON runs (project, domain, schedule_name, scheduled_at DESC)
    WHERE schedule_name IS NOT NULL;
-- A schedule's runs not yet ended: what its overlap policy counts as
-- running, read for a batch of schedules at each firing. Only scheduled
-- runs enter it, and each leaves it once, when it ends (runs_active already
-- makes that update non-HOT).
CREATE INDEX runs_schedule_live ON runs (project, domain, schedule_name)
    WHERE schedule_name IS NOT NULL AND ended_at IS NULL;

-- Schedules (Temporal's). spec holds cron|interval, timezone, jitter,
-- overlap and catchup_window; params the params as given (resolved against
-- the template at each firing). cursor_at is the latest automatic
-- scheduled time decided (started, buffered, skipped or missed): the times
-- after it are still to come. pending holds the times a trigger or a
-- backfill asked for, as [{at, overlap?}] by time; buffered the times the
-- overlap policy keeps until the running run ends, as [time], oldest
-- first. check_at is when the firing loop looks at the schedule next; NULL
-- while nothing can come (paused, nothing pending or buffered).
CREATE TABLE schedules (
    project text NOT NULL,
    domain text NOT NULL,
    name text NOT NULL,
    workflow_name text NOT NULL,
    workflow_version integer,
    params jsonb NOT NULL DEFAULT '{}',
    spec jsonb NOT NULL,
    paused boolean NOT NULL DEFAULT false,
    cursor_at timestamptz NOT NULL,
    pending jsonb NOT NULL DEFAULT '[]',
    buffered jsonb NOT NULL DEFAULT '[]',
    missed_catchup_window bigint NOT NULL DEFAULT 0,
    skipped_overlap bigint NOT NULL DEFAULT 0,
    check_at timestamptz,
    version bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, domain, name)
);
CREATE INDEX schedules_due ON schedules (check_at) WHERE check_at IS NOT NULL;

-- Event triggers (Hatchet's): a published event of event_key starts a run
-- of the template when filter (CEL over event) holds, with params mapped by
-- CEL ({name: expression}).
CREATE TABLE triggers (
    project text NOT NULL,
    domain text NOT NULL,
    name text NOT NULL,
    event_key text NOT NULL,
    workflow_name text NOT NULL,
    workflow_version integer,
    filter text NOT NULL DEFAULT '',
    params jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, domain, name)
);
CREATE INDEX triggers_by_key ON triggers (project, domain, event_key);

-- Published events: one row per id, written in the transaction that starts
-- the event's runs. deliveries holds one {trigger, run?, error?} per trigger
-- of the key at publication.
CREATE TABLE published_events (
    project text NOT NULL,
    domain text NOT NULL,
    id text NOT NULL,
    key text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}',
    deliveries jsonb NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, domain, id)
);

-- +goose Down
DROP TABLE published_events;
DROP TABLE triggers;
DROP TABLE schedules;
DROP INDEX runs_schedule_live;
DROP INDEX runs_by_schedule;
ALTER TABLE runs
    DROP COLUMN workflow_name,
    DROP COLUMN workflow_version,
    DROP COLUMN params,
    DROP COLUMN schedule_name,
    DROP COLUMN scheduled_at,
    DROP COLUMN trigger_name,
    DROP COLUMN event_id;
DROP TABLE workflow_templates;
