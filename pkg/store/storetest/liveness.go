package storetest

import (
	"context"
	"database/sql"
	"time"
)

// The liveness pass judges silence on Postgres's clock (store.SilentWorkers):
// a test moves the rows it reads, never a Go clock.

// Silence makes worker id silent for d: its last heartbeat d before
// Postgres's now(). Errors: Postgres's.
func Silence(ctx context.Context, db *sql.DB, id string, d time.Duration) error {
	_, err := db.ExecContext(ctx, `UPDATE workers SET last_heartbeat_at = now() - make_interval(secs => $2)
		WHERE id = $1`, id, d.Seconds())
	return err
}

// Watched writes the liveness watch of a control plane that has worked for
// d without a gap: the last pass and the heartbeat path's stamp now(), the
// grace origin d before it, no deferral pending. Errors: Postgres's.
func Watched(ctx context.Context, db *sql.DB, d time.Duration) error {
	_, err := db.ExecContext(ctx, `WITH p AS (UPDATE heartbeat_path SET served_at = now())
		UPDATE liveness_watch SET checked_at = now(), grace_origin = now() - make_interval(secs => $1),
			deferred_at = NULL`, d.Seconds())
	return err
}

// Elapse makes d pass with the scheduler's passes and the heartbeat path
// working but no heartbeat recorded: every worker's last heartbeat, the
// grace origin and a pending deferral move d into the past; the last pass
// and the path's stamp are now(). Errors: Postgres's.
func Elapse(ctx context.Context, db *sql.DB, d time.Duration) error {
	_, err := db.ExecContext(ctx, `WITH p AS (UPDATE heartbeat_path SET served_at = now()),
		w AS (UPDATE workers SET last_heartbeat_at = last_heartbeat_at - make_interval(secs => $1))
		UPDATE liveness_watch SET checked_at = now(), grace_origin = grace_origin - make_interval(secs => $1),
			deferred_at = deferred_at - make_interval(secs => $1)`, d.Seconds())
	return err
}

// StopWatch makes the scheduler's last liveness pass d before now(), as if
// no replica had run one since. Errors: Postgres's.
func StopWatch(ctx context.Context, db *sql.DB, d time.Duration) error {
	_, err := db.ExecContext(ctx, `UPDATE liveness_watch SET checked_at = now() - make_interval(secs => $1)`, d.Seconds())
	return err
}

// StopPath makes the heartbeat path's stamp d before now(), as if no api
// replica had served heartbeats since. Errors: Postgres's.
func StopPath(ctx context.Context, db *sql.DB, d time.Duration) error {
	_, err := db.ExecContext(ctx, `UPDATE heartbeat_path SET served_at = now() - make_interval(secs => $1)`, d.Seconds())
	return err
}
