-- +goose Up
-- Retention. A run keeps its spec's ttl for each outcome (ttl_success_ms,
-- ttl_failure_ms; NULL: the spec does not say) and, once it has ended,
-- when it expires (expires_at: stamped by the statement that ends it from
-- its own ttl, else its project's settings, else the server's defaults;
-- NULL while it runs, for a child run and when it is kept). The reaper
-- reads runs_expiry oldest first.
ALTER TABLE runs ADD COLUMN ttl_success_ms bigint, ADD COLUMN ttl_failure_ms bigint, ADD COLUMN expires_at timestamptz;
CREATE INDEX runs_expiry ON runs (expires_at) WHERE expires_at IS NOT NULL;
-- A project's settings as set (settings, for GET) and the retention they
-- give each outcome (NULL: say nothing). The row of project '' holds the
-- server's defaults, written by each scheduler as it starts.
CREATE TABLE project_settings (
    project           text        PRIMARY KEY,
    settings          jsonb       NOT NULL DEFAULT '{}',
    retain_success_ms bigint,
    retain_failure_ms bigint,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE project_settings;
DROP INDEX runs_expiry;
ALTER TABLE runs DROP COLUMN expires_at, DROP COLUMN ttl_failure_ms, DROP COLUMN ttl_success_ms;
