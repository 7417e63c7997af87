-- +goose Up
-- Fair share. A task carries its run's fairness key (runs.fairness_key,
-- copied as it is inserted), so that the pass finds the groups of PENDING
-- tasks it interleaves, (band, project, fairness key), by a loose scan of
-- tasks_pending_fair alone, and reads the oldest of each by the same index.
-- tasks_pending_fair replaces tasks_pending_priority (its leading columns
-- serve a band range as that one did): one partial index written per
-- PENDING task, as before.
ALTER TABLE tasks ADD COLUMN fairness_key text NOT NULL DEFAULT '';
CREATE INDEX tasks_pending_fair ON tasks (priority DESC, project, fairness_key, id) WHERE state = 1;
DROP INDEX tasks_pending_priority;
-- A project's fair-share weight (1..1000; a project without a row weighs 1).
CREATE TABLE project_fair_shares (
    project    text        PRIMARY KEY,
    weight     integer     NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE project_fair_shares;
CREATE INDEX tasks_pending_priority ON tasks (priority DESC, id) WHERE state = 1;
DROP INDEX tasks_pending_fair;
ALTER TABLE tasks DROP COLUMN fairness_key;
