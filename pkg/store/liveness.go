package store

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Fenced liveness (domain.GraceOrigin, domain.JudgeSilence): the heartbeat
// path's stamp, the liveness pass's watch row, and the statements that find
// and mark silent workers. Every time they compare or write is Postgres's
// now(); the rules that read them are the scheduler's.

// StampHeartbeatPath records, on Postgres's clock, that an api replica
// serves heartbeats now (heartbeat_path.served_at = now()). Every replica
// stamps the one row, so it holds the latest of them. Locks: that row.
func (s Workers) StampHeartbeatPath(ctx context.Context) error {
	res := s.exec(ctx, `UPDATE heartbeat_path SET served_at = now()`)
	if res.Error == nil && res.RowsAffected == 0 {
		return ErrNotFound
	}
	return mapErr(res.Error)
}

// watchRow is LockLivenessWatch's row.
type watchRow struct {
	Now         time.Time
	CheckedAt   *time.Time
	GraceOrigin *time.Time
	DeferredAt  *time.Time
	ServedAt    *time.Time
}

// LockLivenessWatch locks the liveness watch row (FOR UPDATE: one pass at a
// time, whichever replica leads) and returns it with the transaction's
// now() and the heartbeat path's stamp (read, not locked). Errors:
// ErrNotFound when the row is missing.
func (s Workers) LockLivenessWatch(ctx context.Context) (domain.LivenessWatch, error) {
	var rows []watchRow
	err := s.raw(ctx, `SELECT now() AS now, w.checked_at, w.grace_origin, w.deferred_at,
			(SELECT p.served_at FROM heartbeat_path p) AS served_at
		FROM liveness_watch w FOR UPDATE`).Scan(&rows).Error
	if err != nil {
		return domain.LivenessWatch{}, mapErr(err)
	}
	if len(rows) == 0 {
		return domain.LivenessWatch{}, ErrNotFound
	}
	r := rows[0]
	return domain.LivenessWatch{Now: r.Now, CheckedAt: orZero(r.CheckedAt), Origin: orZero(r.GraceOrigin),
		DeferredAt: orZero(r.DeferredAt), ServedAt: orZero(r.ServedAt)}, nil
}

// SaveLivenessWatch writes a pass's watch: checked_at = now(), the grace
// origin, and the pending deferral (zero: none). Locks: the watch row.
func (s Workers) SaveLivenessWatch(ctx context.Context, origin, deferredAt time.Time) error {
	var deferred *time.Time
	if !deferredAt.IsZero() {
		deferred = &deferredAt
	}
	return mapErr(s.exec(ctx, `UPDATE liveness_watch SET checked_at = now(), grace_origin = ?, deferred_at = ?`,
		origin, deferred).Error)
}

// silentWhere is the condition of a silent alive worker: max(last
// heartbeat, origin) < now() - grace, written as two comparisons so that
// workers_alive_heartbeat serves it. Its named parameters: @origin, and
// @grace in seconds.
const silentWhere = `state = 'alive' AND last_heartbeat_at < now() - make_interval(secs => @grace)
	AND CAST(@origin AS timestamptz) < now() - make_interval(secs => @grace)`

// SilentWorkers returns, on Postgres's clock, the ids of the alive workers
// silent for grace since max(their last heartbeat, origin), in id order,
// and how many workers are alive (counted only when some are silent: 0
// otherwise). Read, not locked.
func (s Workers) SilentWorkers(ctx context.Context, origin time.Time, grace time.Duration) (ids []string, alive int,
	err error) {
	var rows []struct {
		ID    string
		Alive int
	}
	err = s.raw(ctx, `SELECT id, (SELECT count(*) FROM workers WHERE state = 'alive') AS alive FROM workers
		WHERE `+silentWhere+` ORDER BY id`, map[string]any{"origin": origin, "grace": grace.Seconds()}).Scan(&rows).Error
	if err != nil {
		return nil, 0, mapErr(err)
	}
	ids = make([]string, len(rows))
	for i, r := range rows {
		ids[i], alive = r.ID, r.Alive
	}
	return ids, alive, nil
}

// MarkWorkersDead makes dead those of ids still alive and silent (as
// SilentWorkers judges them, on Postgres's clock: a heartbeat recorded
// meanwhile keeps its worker alive), so that a later heartbeat answers
// ErrNotFound, and returns them. Locks: those workers' rows.
func (s Workers) MarkWorkersDead(ctx context.Context, ids []string, origin time.Time, grace time.Duration) ([]string,
	error) {
	dead := []string{}
	if len(ids) == 0 {
		return dead, nil
	}
	err := s.raw(ctx, `UPDATE workers SET state = '`+WorkerDead+`', updated_at = now(), version = version + 1
		WHERE id IN @ids AND `+silentWhere+` RETURNING id`,
		map[string]any{"ids": ids, "origin": origin, "grace": grace.Seconds()}).Scan(&dead).Error
	return dead, mapErr(err)
}

// orZero returns *t, or the zero time for nil.
func orZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
