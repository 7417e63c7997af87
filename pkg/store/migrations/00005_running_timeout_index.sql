-- +goose Up
-- The tasks that can time out: running (BUILDING 2, RUNNING 3) with a
-- timeout. Every expiry pass looks for them (ExpiryDue); without this index
-- it would read the whole tasks table, history included, on every pass.
CREATE INDEX tasks_running_timeout ON tasks (id) WHERE timeout_ms > 0 AND state IN (2, 3);

-- +goose Down
DROP INDEX tasks_running_timeout;
