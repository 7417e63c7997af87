-- +goose Up
-- Flyte's executor semantics: error codes on attempts, the catalog (cache
-- entries and serializable reservations) and output shipped while an
-- attempt runs.
ALTER TABLE attempts ADD COLUMN code text;

-- A task's plugin: placement puts one of an optional plugin only on the
-- workers that advertise it.
ALTER TABLE tasks ADD COLUMN plugin text NOT NULL DEFAULT '';

-- A discoverable step's key and status; a HIT step's outputs (it ran no
-- task, so no attempt holds them); how many times a step has checked a
-- reservation another action holds (the exponent of its wait backoff).
ALTER TABLE actions
    ADD COLUMN cache_key    text,
    ADD COLUMN cache_status text,
    ADD COLUMN outputs      jsonb,
    ADD COLUMN cache_waits  int NOT NULL DEFAULT 0;
CREATE INDEX actions_cache_waiting ON actions (project, domain, cache_key) WHERE phase = 'WAITING_FOR_CACHE';

-- A discoverable step's outputs, by key within a project and domain.
CREATE TABLE cache_entries (
    project     text        NOT NULL,
    domain      text        NOT NULL,
    key         text        NOT NULL,
    version     text        NOT NULL,
    run_name    text        NOT NULL,
    action_name text        NOT NULL,
    outputs     jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    PRIMARY KEY (project, domain, key)
);
CREATE INDEX cache_entries_created ON cache_entries (project, domain, created_at DESC, key);

-- Who executes a serializable key now; expired ones may be taken over.
CREATE TABLE cache_reservations (
    project     text        NOT NULL,
    domain      text        NOT NULL,
    key         text        NOT NULL,
    run_name    text        NOT NULL,
    action_name text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, domain, key)
);
CREATE INDEX cache_reservations_owner ON cache_reservations (project, domain, run_name, action_name);

-- Output chunks in the order they were shipped, bounded per attempt: past
-- the bound the oldest are deleted, and a marker row per stream (dropped > 0,
-- data empty) says how many bytes of that stream went; it keeps the seq of
-- the newest row it replaced, so it stays in front of what is kept.
-- byte_offset is where a chunk starts in the attempt's output, both streams
-- in shipping order (a marker's: where the output it replaced ended), so the
-- total shipped is the last row's byte_offset + octet_length(data).
CREATE TABLE attempt_log_chunks (
    attempt_id  bigint      NOT NULL REFERENCES attempts ON DELETE CASCADE,
    seq         bigserial,
    stream      text        NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    data        text        NOT NULL,
    byte_offset bigint      NOT NULL,
    dropped     bigint      NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (attempt_id, seq)
);
CREATE INDEX attempt_log_chunks_offset ON attempt_log_chunks (attempt_id, byte_offset) WHERE dropped = 0;

-- +goose Down
DROP TABLE attempt_log_chunks;
DROP TABLE cache_reservations;
DROP TABLE cache_entries;
ALTER TABLE actions DROP COLUMN cache_key, DROP COLUMN cache_status, DROP COLUMN outputs, DROP COLUMN cache_waits;
ALTER TABLE tasks DROP COLUMN plugin;
ALTER TABLE attempts DROP COLUMN code;
