-- +goose Up
-- What placement needs of each task (copied from its step when it starts).
ALTER TABLE tasks
    ADD COLUMN priority     smallint NOT NULL DEFAULT 1,
    ADD COLUMN cpu_millis   bigint   NOT NULL DEFAULT 0,
    ADD COLUMN memory_bytes bigint   NOT NULL DEFAULT 0,
    ADD COLUMN constraints  jsonb    NOT NULL DEFAULT '[]',
    ADD COLUMN coscheduled  boolean  NOT NULL DEFAULT false,
    ADD COLUMN timeout_ms   bigint   NOT NULL DEFAULT 0;
CREATE INDEX tasks_pending_priority ON tasks (priority DESC, id) WHERE state = 1;
-- Tasks waiting with a scheduling deadline.
CREATE INDEX tasks_scheduling_deadline ON tasks (scheduling_deadline) WHERE state = 1 AND scheduling_deadline IS NOT NULL;

-- What a worker offers; 0 = not declared (unlimited).
ALTER TABLE workers
    ADD COLUMN cpu_millis   bigint NOT NULL DEFAULT 0,
    ADD COLUMN memory_bytes bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE workers DROP COLUMN cpu_millis, DROP COLUMN memory_bytes;
DROP INDEX tasks_scheduling_deadline;
DROP INDEX tasks_pending_priority;
ALTER TABLE tasks DROP COLUMN priority, DROP COLUMN cpu_millis, DROP COLUMN memory_bytes,
    DROP COLUMN constraints, DROP COLUMN coscheduled, DROP COLUMN timeout_ms;
