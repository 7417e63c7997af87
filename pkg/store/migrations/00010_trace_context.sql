-- +goose Up
-- The W3C traceparent of the trace a task was created in (the run's
-- request, carried through the queues), so that the scheduling pass that
-- places the task dispatches its attempts in that trace. '' when tracing
-- carried none.
ALTER TABLE tasks ADD COLUMN trace_parent text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE tasks DROP COLUMN trace_parent;
