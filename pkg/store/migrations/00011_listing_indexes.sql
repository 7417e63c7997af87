-- +goose Up
-- A listing index that starts with a key's leading columns can win that
-- key's lookups. While a table has no statistics (a new database, until
-- autovacuum first analyzes it), Postgres guesses an equality on (project,
-- domain) as selective as one on the whole key, and the generic plan a
-- connection keeps for a prepared statement is made then: every lookup of
-- a run by its name read all the runs of its domain through runs_list (1.7
-- ms a lookup at 20,000 runs, 0.07 through the key), and every read of one
-- run's events all the events of its domain through run_events_scope.
-- Each listing index is therefore partial, on a predicate every row meets
-- (listOnly in the store): a lookup does not state it, so cannot use the
-- index; the listing queries state it.
DROP INDEX runs_list;
CREATE INDEX runs_list ON runs (project, domain, created_at DESC, name DESC) WHERE created_at > '-infinity';
DROP INDEX run_events_scope;
CREATE INDEX run_events_scope ON run_events (project, domain, id) WHERE id > 0;
DROP INDEX cache_entries_created;
CREATE INDEX cache_entries_created ON cache_entries (project, domain, created_at DESC, key) WHERE created_at > '-infinity';

-- +goose Down
DROP INDEX cache_entries_created;
CREATE INDEX cache_entries_created ON cache_entries (project, domain, created_at DESC, key);
DROP INDEX run_events_scope;
CREATE INDEX run_events_scope ON run_events (project, domain, id);
DROP INDEX runs_list;
CREATE INDEX runs_list ON runs (project, domain, created_at DESC, name DESC);
