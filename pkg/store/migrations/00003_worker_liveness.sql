-- +goose Up
-- Worker liveness and ARC's self-healing registrations.
--   placeable_after: no new work before this time — the failure backoff
--     (table[n] after the last of n recorded failures); NULL = no backoff.
--   last_failure_at: the time of the latest entry of `failures`.
--   draining: the executor is shutting down (it said so in a heartbeat); it
--     finishes what it holds and takes nothing new.
ALTER TABLE workers
    ADD COLUMN placeable_after timestamptz,
    ADD COLUMN last_failure_at timestamptz,
    ADD COLUMN draining        boolean NOT NULL DEFAULT false;
-- The dead-worker pass scans alive workers by heartbeat age.
CREATE INDEX workers_alive_heartbeat ON workers (last_heartbeat_at) WHERE state = 'alive';

-- +goose Down
DROP INDEX workers_alive_heartbeat;
ALTER TABLE workers DROP COLUMN placeable_after, DROP COLUMN last_failure_at, DROP COLUMN draining;
