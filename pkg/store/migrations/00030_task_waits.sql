-- +goose Up
-- A task's run of waits for its target (KubeVela's wait for healthy): how
-- many waiting attempts in a row it made and when the scheduler decided the
-- first of them. The scheduler writes both with each outcome it decides
-- (UpdateTaskOutcome): a wait extends the run, any other outcome ends it
-- (0, NULL). A column with a constant default is added without a rewrite.
ALTER TABLE tasks ADD COLUMN wait_count integer NOT NULL DEFAULT 0,
    ADD COLUMN waiting_since timestamptz;

-- +goose Down
ALTER TABLE tasks DROP COLUMN waiting_since, DROP COLUMN wait_count;
