package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
)

// reserveSQL takes a key's reservation for @run/@action until @expires:
// it inserts it, or takes over one this action holds already, one expired at
// @now (its owner's executor stopped heartbeating) or one whose owner action
// has ended with no attempt of it still live (an owner aborted before any
// attempt of it ran releases nothing itself; one whose process still runs,
// its abort not yet delivered, may still write the key's outputs). It
// returns the holder afterwards only when that is the caller.
var reserveSQL = `INSERT INTO cache_reservations AS r (project, domain, key, run_name, action_name, expires_at, created_at)
	VALUES (@project, @domain, @key, @run, @action, @expires, @now)
	ON CONFLICT (project, domain, key) DO UPDATE SET run_name = excluded.run_name, action_name = excluded.action_name,
		expires_at = excluded.expires_at, created_at = excluded.created_at
	WHERE (r.run_name, r.action_name) = (excluded.run_name, excluded.action_name) OR r.expires_at <= @now
		OR NOT EXISTS (SELECT 1 FROM actions x WHERE (x.project, x.domain, x.run_name, x.name) =
			(r.project, r.domain, r.run_name, r.action_name) AND x.ended_at IS NULL)
		AND NOT EXISTS (SELECT 1 FROM tasks t JOIN attempts at ON at.task_id = t.id
			WHERE (t.project, t.domain, t.run_name, t.action_name) = (r.project, r.domain, r.run_name, r.action_name)
			AND at.state IN ` + sqlLive + `)
	RETURNING run_name`

// ReserveCache takes the reservation of key for owner until expires (Flyte's
// catalog reservation; see reserveSQL for when it may take over another's)
// and writes a "cache.reserved" event. It returns false, changing nothing,
// when another action holds a live reservation of key.
func (s Cache) ReserveCache(ctx context.Context, owner domain.ActionKey, key string, expires, now time.Time) (bool, error) {
	var got []string
	err := s.raw(ctx, reserveSQL, sql.Named("project", owner.Project), sql.Named("domain", owner.Domain),
		sql.Named("key", key), sql.Named("run", owner.Run), sql.Named("action", owner.Action),
		sql.Named("expires", expires), sql.Named("now", now)).Scan(&got).Error
	if err != nil || len(got) == 0 {
		return false, mapErr(err)
	}
	return true, s.event(ctx, owner.RunKey, owner.Action, "cache.reserved", map[string]any{"key": key,
		"expires_at": expires})
}

// ReleaseCache deletes owner's reservation of key, if it holds it, and then
// writes a "cache_released" event with why (e.g. "succeeded", "aborted").
// It returns whether there was one to release.
func (s Cache) ReleaseCache(ctx context.Context, owner domain.ActionKey, key, why string) (bool, error) {
	res := s.q(ctx).Where("project = ? AND domain = ? AND key = ? AND run_name = ? AND action_name = ?",
		owner.Project, owner.Domain, key, owner.Run, owner.Action).Delete(&CacheReservation{})
	if res.Error != nil || res.RowsAffected == 0 {
		return false, mapErr(res.Error)
	}
	return true, s.event(ctx, owner.RunKey, owner.Action, "cache_released", map[string]any{"key": key, "why": why})
}

// CacheWaiters returns the runs with a step WAITING_FOR_CACHE on key in
// project and dom, read without a lock.
func (s Cache) CacheWaiters(ctx context.Context, project, dom, key string) ([]domain.RunKey, error) {
	var names []string
	err := s.q(ctx).Model(&Action{}).Distinct("run_name").
		Where("project = ? AND domain = ? AND cache_key = ? AND phase = ?", project, dom, key,
			string(domain.PhaseWaitingForCache)).Order("run_name").Pluck("run_name", &names).Error
	out := make([]domain.RunKey, len(names))
	for i, n := range names {
		out[i] = domain.RunKey{Project: project, Domain: dom, Run: n}
	}
	return out, mapErr(err)
}

// extendSQL moves to @expires the reservations whose owner still works on
// its key: an unfinished action with a PENDING task (the control plane
// holds it), or a live attempt (of an ended action too: an aborted one whose
// process still runs) on a worker that heartbeat after @alive. Rows are
// locked in key order.
var extendSQL = `WITH l AS (
	SELECT r.project, r.domain, r.key FROM cache_reservations r
	JOIN actions x ON (x.project, x.domain, x.run_name, x.name) = (r.project, r.domain, r.run_name, r.action_name)
	WHERE EXISTS (
		SELECT 1 FROM tasks t
		LEFT JOIN attempts at ON at.task_id = t.id AND at.number = t.attempt_count
		LEFT JOIN workers w ON w.id = at.worker_id
		WHERE (t.project, t.domain, t.run_name, t.action_name, t.generation) =
			(x.project, x.domain, x.run_name, x.name, x.generation)
		AND (x.ended_at IS NULL AND t.state IN ` + sqlPending + ` OR at.state IN ` + sqlLive + ` AND w.last_heartbeat_at > @alive))
	ORDER BY r.project, r.domain, r.key FOR UPDATE OF r)
UPDATE cache_reservations r SET expires_at = @expires FROM l
WHERE (r.project, r.domain, r.key) = (l.project, l.domain, l.key)`

// ExtendCacheReservations extends to expires the reservations of owners
// still at work (extendSQL): those of workers silent since alive, or of
// ended owners, lapse. It returns how many it extended.
func (s Cache) ExtendCacheReservations(ctx context.Context, alive, expires time.Time) (int64, error) {
	res := s.exec(ctx, extendSQL, sql.Named("alive", alive), sql.Named("expires", expires))
	return res.RowsAffected, mapErr(res.Error)
}

// CompleteFromCache ends a step with a cache hit: SUCCEEDED (from from),
// started and ended now, with its key, status HIT and the entry's outputs,
// its wait cleared; it writes "action.cache_hit" and "action.phase" events.
func (s Cache) CompleteFromCache(ctx context.Context, key domain.ActionKey, from domain.Phase, e CacheEntry,
	now time.Time) error {
	if err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(map[string]any{
		"phase": string(domain.PhaseSucceeded), "started_at": now, "ended_at": now, "cache_key": e.Key,
		"cache_status": domain.CacheHit, "outputs": jsonText(e.Outputs), "waiting_for": nil, "not_before": nil,
		"updated_at": now, "version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	if err := s.event(ctx, key.RunKey, key.Action, "action.cache_hit", map[string]any{"key": e.Key,
		"from_run": e.RunName, "from_action": e.ActionName}); err != nil {
		return err
	}
	return s.event(ctx, key.RunKey, key.Action, "action.phase", map[string]any{"from": from, "to": domain.PhaseSucceeded})
}

// MarkCacheMiss records that a step about to start missed the cache: its
// key and status MISS, its cache wait cleared, phase QUEUED (from from).
// The caller then creates its tasks.
func (s Cache) MarkCacheMiss(ctx context.Context, key domain.ActionKey, from domain.Phase, cacheKey string,
	now time.Time) error {
	if err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(map[string]any{
		"phase": string(domain.PhaseQueued), "cache_key": cacheKey, "cache_status": domain.CacheMiss,
		"waiting_for": nil, "not_before": nil, "updated_at": now, "version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.cache_miss", map[string]any{"key": cacheKey, "from": from,
		"to": domain.PhaseQueued})
}

// WaitForCache makes a step wait, WAITING_FOR_CACHE (from from), for
// another action's reservation of cacheKey: waiting for WaitCache until
// notBefore, its cache_waits set to waits. It writes an
// "action.waiting_for_cache" event.
func (s Cache) WaitForCache(ctx context.Context, key domain.ActionKey, from domain.Phase, cacheKey string, waits int,
	notBefore, now time.Time) error {
	if err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(map[string]any{
		"phase": string(domain.PhaseWaitingForCache), "cache_key": cacheKey, "waiting_for": WaitCache,
		"not_before": notBefore, "cache_waits": waits, "updated_at": now,
		"version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.waiting_for_cache", map[string]any{"key": cacheKey,
		"from": from, "to": domain.PhaseWaitingForCache, "checks": waits, "not_before": notBefore})
}

// SetCacheStatus sets a step's cache status (domain.CachePopulated once its
// entry is written).
func (s Cache) SetCacheStatus(ctx context.Context, key domain.ActionKey, status string, now time.Time) error {
	return mapErr(s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(map[string]any{
		"cache_status": status, "updated_at": now, "version": gorm.Expr("version + 1")}).Error)
}

// jsonText is m as JSON text for a jsonb parameter.
func jsonText(m map[string]string) string {
	if m == nil {
		return "{}"
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(b)
}
