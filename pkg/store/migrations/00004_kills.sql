-- +goose Up
-- Why an action's abort was requested: 'aborted' (a user, a failed job; NULL
-- in rows written before this column) or 'timeout' (the action ends
-- TIMED_OUT). The reconciler passes it to the executor and to the attempts it
-- finds already gone.
ALTER TABLE actions ADD COLUMN abort_cause text;
-- Aborts the reconciler gave up on, for GET /v1/aborts?state=needs_intervention.
CREATE INDEX actions_abort_intervention ON actions (updated_at) WHERE abort_outcome = 'needs_intervention';

-- Attempt-level kills (preemption, an attempt's timeout): the same delivery
-- as an action's abort, one attempt at a time. kill_requested_at is set while
-- the kill is pending; kill_attempt_count counts delivery rounds (a crash
-- keeps it); kill_outcome is 'delivered' or 'needs_intervention' once cleared.
ALTER TABLE attempts
    ADD COLUMN kill_requested_at  timestamptz,
    ADD COLUMN kill_attempt_count integer NOT NULL DEFAULT 0,
    ADD COLUMN kill_cause         text,
    ADD COLUMN kill_outcome       text;
CREATE INDEX attempts_pending_kills ON attempts (kill_requested_at) WHERE kill_requested_at IS NOT NULL;
CREATE INDEX attempts_kill_intervention ON attempts (updated_at) WHERE kill_outcome = 'needs_intervention';

-- +goose Down
DROP INDEX attempts_kill_intervention;
DROP INDEX attempts_pending_kills;
ALTER TABLE attempts DROP COLUMN kill_requested_at, DROP COLUMN kill_attempt_count, DROP COLUMN kill_cause,
    DROP COLUMN kill_outcome;
DROP INDEX actions_abort_intervention;
ALTER TABLE actions DROP COLUMN abort_cause;
