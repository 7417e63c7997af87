-- +goose Up
-- The tasks that can time out: running (BUILDING 2, RUNNING 3) with a
-- timeout. Every scheduling pass looks for them (TimedOutTasks); without this
-- index it read the whole tasks table, history included, on every pass (33 ms
-- at 200,000 finished tasks on the benchmark machine, docs/benchmarks.md).
CREATE INDEX tasks_running_timeout ON tasks (id) WHERE timeout_ms > 0 AND state IN (2, 3);

-- +goose Down
DROP INDEX tasks_running_timeout;
