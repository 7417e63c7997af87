-- +goose NO TRANSACTION
-- +goose Up
-- An action's tasks as its pages list them (the action page, and the first
-- page of each action of a run): the current generation first, each
-- generation in index order, read as a range of one index from any cursor;
-- and each task's state beside its key, so that an action's tasks are
-- counted by state (task_counts) from the index, without the heap once its
-- pages are all-visible. The index takes the place of the unique
-- constraint on the same columns (a task's key): one index kept per task,
-- as before, and a task's state is already an indexed column (the partial
-- indexes' predicates), so no update that was HOT stops being so. It is
-- built CONCURRENTLY under a new name, then takes the old one's; a
-- migration stopped midway can be run again.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS tasks_action_generation_idx_paged
    ON tasks (project, domain, run_name, action_name, generation DESC, idx) INCLUDE (state);
ALTER TABLE tasks DROP CONSTRAINT IF EXISTS tasks_action_generation_idx;
ALTER INDEX tasks_action_generation_idx_paged RENAME TO tasks_action_generation_idx;

-- +goose Down
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS tasks_action_generation_idx_old
    ON tasks (project, domain, run_name, action_name, generation, idx);
DROP INDEX CONCURRENTLY IF EXISTS tasks_action_generation_idx;
ALTER TABLE tasks ADD CONSTRAINT tasks_action_generation_idx UNIQUE USING INDEX tasks_action_generation_idx_old;
