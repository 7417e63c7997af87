-- +goose Up
-- Sub-workflows (Temporal's child workflows, Argo's workflow-of-workflows):
-- a step of kind workflow runs a template as a child run in its run's
-- project and domain. A child names its parent run and step action, the
-- index of the child within the step (0 for a single child; the item's
-- index under for_each), the step's generation it belongs to and its try
-- (how many children of that index started before it, across
-- generations). depth is 0 for a run created through the API and its
-- parent's + 1 for a child (at most 10). runs_parent finds a step's
-- children, and every live child of a run, by one index scan.
ALTER TABLE runs ADD COLUMN parent_run text;
ALTER TABLE runs ADD COLUMN parent_action text;
ALTER TABLE runs ADD COLUMN parent_index integer;
ALTER TABLE runs ADD COLUMN parent_generation integer;
ALTER TABLE runs ADD COLUMN parent_try integer;
ALTER TABLE runs ADD COLUMN depth integer NOT NULL DEFAULT 0 CHECK (depth BETWEEN 0 AND 10);
CREATE INDEX runs_parent ON runs (project, domain, parent_run, parent_action, parent_index, parent_try)
    WHERE parent_run IS NOT NULL;

-- +goose Down
DROP INDEX runs_parent;
ALTER TABLE runs DROP COLUMN depth;
ALTER TABLE runs DROP COLUMN parent_try;
ALTER TABLE runs DROP COLUMN parent_generation;
ALTER TABLE runs DROP COLUMN parent_index;
ALTER TABLE runs DROP COLUMN parent_action;
ALTER TABLE runs DROP COLUMN parent_run;
