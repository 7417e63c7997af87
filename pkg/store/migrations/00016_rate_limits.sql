-- +goose Up
-- A project's rate limits (Hatchet's): a token bucket of capacity
-- limit_count, refilled continuously at limit_count tokens per per_ms.
CREATE TABLE rate_limits (
    project text NOT NULL,
    name text NOT NULL,
    limit_count integer NOT NULL CHECK (limit_count > 0),
    per_ms bigint NOT NULL CHECK (per_ms > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, name)
);
-- One bucket per rate limit and evaluated key ('' for a use without key),
-- created full on its first take: tokens as of updated_at, which the
-- scheduling pass refills and takes from under the placement lock, in the
-- transaction that binds the tasks that take them.
CREATE TABLE rate_limit_buckets (
    project text NOT NULL,
    name text NOT NULL,
    key text NOT NULL,
    tokens double precision NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (project, name, key),
    FOREIGN KEY (project, name) REFERENCES rate_limits (project, name) ON DELETE CASCADE
);

-- A task's admission, evaluated when it is created: its step's concurrency
-- key and max_tasks (NULL: the step has none), and the rate limits it takes
-- tokens of, [{name, key, units}] (NULL: none). What holds a slot of a key
-- is counted from the tasks ASSIGNED, BUILDING or RUNNING, never stored.
ALTER TABLE tasks
    ADD COLUMN concurrency_key text,
    ADD COLUMN concurrency_max integer,
    ADD COLUMN rate_limits jsonb;
-- A key's tasks holding a slot (ASSIGNED 9, BUILDING 2, RUNNING 3) or
-- waiting for one (PENDING 1): the pass's count and the ledger's read.
-- Only tasks of a step with concurrency enter it.
CREATE INDEX tasks_concurrency_key ON tasks (project, domain, concurrency_key, state)
    WHERE concurrency_key IS NOT NULL AND state IN (1, 2, 3, 9);

-- +goose Down
DROP INDEX tasks_concurrency_key;
ALTER TABLE tasks
    DROP COLUMN concurrency_key,
    DROP COLUMN concurrency_max,
    DROP COLUMN rate_limits;
DROP TABLE rate_limit_buckets;
DROP TABLE rate_limits;
