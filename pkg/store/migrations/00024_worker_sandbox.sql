-- +goose Up
-- How each worker's executor isolates its attempts, as it registered: none
-- (every attempt runs as one user), or the mechanisms every attempt gets,
-- joined with + (e.g. uid+pidns+netns+rlimit). Workers registered before it
-- are none: an executor of that time shared one user.
ALTER TABLE workers ADD COLUMN sandbox text NOT NULL DEFAULT 'none';

-- +goose Down
ALTER TABLE workers DROP COLUMN sandbox;
