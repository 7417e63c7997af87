package scheduler

import (
	"context"
	"fmt"
	"time"
)

// The cache sweep: the leader deletes the catalog's dead rows — entries
// past their writer's max_age (domain.CacheEntryExpired: a hit for no
// reader) and reservations expired long ago that no owner will extend —
// in short transactions of at most CacheConfig.SweepBatch rows, each
// waiting for no other (SKIP LOCKED), so a create, a report or a placement
// never waits behind it for more than one batch.

// CacheSweepResult is what one cache sweep deleted.
type CacheSweepResult struct {
	// Entries counts the expired cache entries deleted.
	Entries int64
	// Reservations counts the lapsed reservations deleted.
	Reservations int64
}

// sweepCacheEvery runs sweepCache every CacheConfig.SweepInterval until
// ctx ends, and logs what each sweep did.
func (s *Scheduler) sweepCacheEvery(ctx context.Context) {
	tick := time.NewTicker(s.cfg.Cache.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		res, err := s.sweepCache(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("cache sweep failed", "err", err)
		}
		if res.Entries > 0 || res.Reservations > 0 {
			s.log.Info("cache sweep", "entries", res.Entries, "reservations", res.Reservations)
		}
	}
}

// sweepCache deletes, batch after batch, the cache entries expired at the
// sweep's start (CacheConfig.Now), the earliest first, until a batch finds
// fewer than SweepBatch; then the same way the reservations that expired
// more than ReservationRetention before it. An entry without max_age is
// never deleted.
func (s *Scheduler) sweepCache(ctx context.Context) (CacheSweepResult, error) {
	now, limit := s.cfg.Cache.Now(), s.cfg.Cache.SweepBatch
	var res CacheSweepResult
	var err error
	res.Entries, err = drain(ctx, limit, func() (int64, error) {
		return s.store.Cache().DeleteExpiredCacheEntries(ctx, now, limit)
	})
	s.metrics.cacheSwept.WithLabelValues("entry").Add(float64(res.Entries))
	if err != nil {
		return res, fmt.Errorf("delete expired cache entries: %w", err)
	}
	lapsed := now.Add(-s.cfg.Cache.ReservationRetention)
	res.Reservations, err = drain(ctx, limit, func() (int64, error) {
		return s.store.Cache().DeleteLapsedCacheReservations(ctx, lapsed, limit)
	})
	s.metrics.cacheSwept.WithLabelValues("reservation").Add(float64(res.Reservations))
	if err != nil {
		return res, fmt.Errorf("delete cache reservations expired before %s: %w", lapsed.Format(time.RFC3339), err)
	}
	return res, nil
}

// drain runs batch, one transaction of at most limit deletions, until one
// deletes fewer, fails or ctx ends, and returns how many they deleted.
func drain(ctx context.Context, limit int, batch func() (int64, error)) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := batch()
		total += n
		if err != nil || n < int64(limit) {
			return total, err
		}
	}
}
