-- +goose Up
-- A project's event stream reads its run_events by id after the last one a
-- watcher saw (EventsAfter without a run): without this index it would read
-- every row of the project through run_events_run and sort them.
CREATE INDEX run_events_scope ON run_events (project, domain, id);

-- +goose Down
DROP INDEX run_events_scope;
