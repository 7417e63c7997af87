-- +goose Up
-- Run-level admission. concurrency_key is the run's evaluated concurrency
-- key (NULL: its spec has no concurrency); admitted_at is when it took a
-- slot (NULL while it waits, and again once a restart is requested).
-- What holds a slot is derived, never counted: an admitted run of the key
-- not yet ended, or ended with an abort still pending (its processes may
-- run). pending_reason says why a waiting run waits. fairness_key is the
-- run's evaluated fairness key ('' when its spec has none).
ALTER TABLE runs
    ADD COLUMN concurrency_key text,
    ADD COLUMN admitted_at timestamptz,
    ADD COLUMN pending_reason text,
    ADD COLUMN fairness_key text NOT NULL DEFAULT '';
-- A key's unfinished runs in line order, and its runs waiting to restart:
-- the holders and waiters admission reads under the key's lock. Only runs
-- with a key enter it, and each leaves it once, when it ends.
CREATE INDEX runs_concurrency_line ON runs (project, domain, concurrency_key, created_at, name)
    WHERE concurrency_key IS NOT NULL AND (ended_at IS NULL OR restart_requested_at IS NOT NULL);

-- +goose Down
DROP INDEX runs_concurrency_line;
ALTER TABLE runs
    DROP COLUMN concurrency_key,
    DROP COLUMN admitted_at,
    DROP COLUMN pending_reason,
    DROP COLUMN fairness_key;
