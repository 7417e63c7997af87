-- +goose Up
-- Fenced liveness: a worker's silence counts only from a moment when the
-- scheduler and the heartbeat path were both working (domain.GraceOrigin).
-- Every time here is Postgres's now().
--
-- heartbeat_path, one row: served_at is when an api replica last recorded
-- that it serves heartbeats; every replica stamps it while it serves
-- (NULL: never).
CREATE TABLE heartbeat_path (
    id        boolean PRIMARY KEY DEFAULT true CHECK (id),
    served_at timestamptz
);
-- liveness_watch, one row, the scheduling leader's liveness pass's:
-- checked_at, when the last pass ran; grace_origin, the moment silence
-- counts from; deferred_at, when a pass deferred a mass death it has not
-- confirmed yet (NULL: none). NULL checked_at: no pass ever ran.
CREATE TABLE liveness_watch (
    id           boolean PRIMARY KEY DEFAULT true CHECK (id),
    checked_at   timestamptz,
    grace_origin timestamptz,
    deferred_at  timestamptz
);
INSERT INTO heartbeat_path DEFAULT VALUES;
INSERT INTO liveness_watch DEFAULT VALUES;

-- +goose Down
DROP TABLE liveness_watch;
DROP TABLE heartbeat_path;
