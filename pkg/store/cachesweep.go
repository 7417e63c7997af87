package store

import (
	"context"
	"database/sql"
	"time"
)

// sqlCacheExpired is domain.CacheEntryExpired in SQL, over cache_entries
// at @now: an entry with an expires_at (its writer's max_age) expires from
// then on; one without never does. It states the IS NOT NULL that the
// partial index cache_entries_expiry is built on.
const sqlCacheExpired = "expires_at IS NOT NULL AND expires_at <= @now"

// deleteExpiredCacheEntriesSQL deletes up to @limit entries expired at
// @now (sqlCacheExpired), the earliest expired first, read from the front
// of cache_entries_expiry. Its rows are named by ctid, read under their
// locks in the same statement, so that the delete is a TID scan whatever a
// generic plan guesses of @limit. It skips the rows another transaction
// holds (an entry being written again now, which may no longer be
// expired), so it waits for no transaction; a write of the same key waits
// for this one's commit, a batch's time.
var deleteExpiredCacheEntriesSQL = `DELETE FROM cache_entries WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM cache_entries WHERE ` + sqlCacheExpired + `
	ORDER BY expires_at LIMIT @limit FOR UPDATE SKIP LOCKED))`

// DeleteExpiredCacheEntries deletes up to limit (1 to 1000) of the cache
// entries expired at now (domain.CacheEntryExpired), the earliest expired
// first, in one statement (deleteExpiredCacheEntriesSQL: its own short
// transaction unless s is one), and returns how many it deleted. Their
// reservations stay (an owner may still run). An entry without max_age is
// never deleted.
func (s Cache) DeleteExpiredCacheEntries(ctx context.Context, now time.Time, limit int) (int64, error) {
	res := s.exec(ctx, deleteExpiredCacheEntriesSQL, sql.Named("now", now), sql.Named("limit", min(max(limit, 1), 1000)))
	return res.RowsAffected, mapErr(res.Error)
}

// deleteLapsedReservationsSQL deletes up to @limit reservations that
// expired before @before, the earliest first, named by ctid as
// deleteExpiredCacheEntriesSQL names entries. cache_reservations holds one
// row per key being executed, so it is read whole; no index on expires_at
// is kept, since every liveness pass rewrites that column. It skips the
// rows another transaction holds (an extension, a take-over), so it waits
// for none.
const deleteLapsedReservationsSQL = `DELETE FROM cache_reservations WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM cache_reservations WHERE expires_at < @before
	ORDER BY expires_at LIMIT @limit FOR UPDATE SKIP LOCKED))`

// DeleteLapsedCacheReservations deletes up to limit (1 to 1000) of the
// reservations that expired before before, the earliest first, in one
// statement (deleteLapsedReservationsSQL: its own short transaction unless
// s is one), and returns how many it deleted. A reservation expired is
// anyone's to take (ReserveCache), so deleting it frees nothing that was
// held; it only drops the row of an owner gone for good, which no
// extension will bring back.
func (s Cache) DeleteLapsedCacheReservations(ctx context.Context, before time.Time, limit int) (int64, error) {
	res := s.exec(ctx, deleteLapsedReservationsSQL, sql.Named("before", before), sql.Named("limit", min(max(limit, 1), 1000)))
	return res.RowsAffected, mapErr(res.Error)
}
