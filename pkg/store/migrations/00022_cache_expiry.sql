-- +goose NO TRANSACTION
-- +goose Up
-- The entries that expire (their writer set max_age), in expiry order: the
-- scheduler's cache sweep reads the expired ones oldest first, a batch at a
-- time, from the front of this index. Entries without max_age (expires_at
-- NULL) never expire and are not in it. Built CONCURRENTLY: writes go on
-- meanwhile, and a migration stopped midway can be run again.
CREATE INDEX CONCURRENTLY IF NOT EXISTS cache_entries_expiry ON cache_entries (expires_at)
    WHERE expires_at IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS cache_entries_expiry;
