-- +goose Up
-- The connections LISTENing on the run_events feed's channel
-- (store.ListenEvents), each registered until expires_at unless it renews.
-- A transaction that writes events notifies only while a registration is
-- live: Postgres's NOTIFY takes one database-wide lock at commit, so every
-- notifying transaction commits one at a time, and nobody may be listening.
CREATE TABLE event_listeners (
    id uuid PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
-- The writers' check reads it by index: the by-key pool's connections plan
-- without sequential scans, and a scan costed as disabled would have
-- Postgres JIT-compile the statement at every call.
CREATE INDEX event_listeners_expiry ON event_listeners (expires_at);

-- +goose Down
DROP TABLE event_listeners;
