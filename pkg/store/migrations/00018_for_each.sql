-- +goose Up
-- A for_each task's item, as its task receives it (the string itself, or
-- its compact JSON); NULL for a replica.
ALTER TABLE tasks ADD COLUMN item text;
-- The outputs of a task that SUCCEEDED without running: an item whose
-- cache entry was valid, or an item an earlier generation of its step
-- already succeeded at (a restart reruns only the failed items). NULL for
-- a task whose outputs are its current attempt's.
ALTER TABLE tasks ADD COLUMN outputs jsonb;

-- +goose Down
ALTER TABLE tasks DROP COLUMN outputs;
ALTER TABLE tasks DROP COLUMN item;
