package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
)

// The catalog (Flyte's executor: evaluate the cache before execution,
// finalize it after): a discoverable task step is looked up when it would
// start, and a serializable one reserves its key so that concurrent runs
// execute it once.

// CacheConfig tunes the catalog's reservations and its sweep.
type CacheConfig struct {
	// ReservationTTL is how long a reservation lives unless extended: the
	// liveness pass extends those whose owner still works (a PENDING task,
	// or a live attempt on a worker that heartbeat within the TTL), so an
	// owner whose executor died loses it within the TTL and a waiter takes
	// over. Default 3s: 3 × the executors' 1s heartbeat interval (Flyte's
	// reservation heartbeat multiplier).
	ReservationTTL time.Duration
	// SweepInterval is how often the leader's cache sweep deletes the
	// entries past their max_age and the reservations expired longer than
	// ReservationRetention (sweepCache). Default 1m.
	SweepInterval time.Duration
	// SweepBatch is the most rows one transaction of the sweep deletes, 1
	// to 1000. Default 1000.
	SweepBatch int
	// ReservationRetention is how long after its expiry a reservation no
	// owner extended is deleted by the sweep. Default 1h.
	ReservationRetention time.Duration
	// Now is the sweep's clock. Default time.Now.
	Now func() time.Time
}

func (c *CacheConfig) defaults() {
	c.ReservationTTL = cmp.Or(c.ReservationTTL, 3*time.Second)
	c.SweepInterval = cmp.Or(c.SweepInterval, time.Minute)
	c.SweepBatch = min(cmp.Or(c.SweepBatch, 1000), 1000)
	c.ReservationRetention = cmp.Or(c.ReservationRetention, time.Hour)
	if c.Now == nil {
		c.Now = time.Now
	}
}

// startCached starts discoverable task step a (Flyte's
// evaluateCacheBeforeExecution): its key is domain.CacheKey over its
// resolved inputs. A valid entry (domain.CacheEntryValid with the step's
// max_age) is a hit: the step SUCCEEDS at once with the entry's outputs and
// runs no task (hit true). Else a serializable step reserves the key; when
// another action holds it, the step waits WAITING_FOR_CACHE and re-checks
// after KubeVela's wait backoff (capped at WorkflowConfig.WaitBackoffCap),
// or at once when the holder releases it. Otherwise the step misses (MISS)
// and its tasks are created.
func (s *Scheduler) startCached(ctx context.Context, tx *store.Store, key domain.RunKey, params map[string]any, a store.Action,
	now time.Time) (hit bool, err error) {
	ak, from := key.Action(a.Name), domain.Phase(a.Phase)
	outs, err := tx.Actions().StepOutputs(ctx, key, domain.InputProducers(a.Spec.Inputs))
	if err != nil {
		return false, fmt.Errorf("read input outputs: %w", err)
	}
	ck := domain.CacheKey(key.Project, key.Domain, a.Spec, domain.ResolveInputs(a.Spec.Inputs, outs))
	e, hit, err := validEntry(ctx, tx, ak, ck, a.Spec.Cache, now)
	if err != nil {
		return false, err
	}
	if hit {
		return true, completeFromCache(ctx, tx, ak, from, e, now)
	}
	if a.Spec.Cache.Serializable {
		held, err := tx.Cache().ReserveCache(ctx, ak, ck, now.Add(s.cfg.Cache.ReservationTTL), now)
		if err != nil {
			return false, fmt.Errorf("reserve cache key %s: %w", ck, err)
		}
		if !held {
			n := a.CacheWaits + 1
			wake := now.Add(domain.KubeVela{Cap: s.cfg.Workflow.WaitBackoffCap}.Delay(n))
			if err := tx.Cache().WaitForCache(ctx, ak, from, ck, n, wake, now); err != nil {
				return false, fmt.Errorf("wait for cache key %s: %w", ck, err)
			}
			return false, nil
		}
		// The holder may have written the entry and released the key between
		// the read above and the reservation (each statement reads what was
		// committed when it began): read it again once the key is held, and
		// give the reservation back on a hit.
		if e, hit, err = validEntry(ctx, tx, ak, ck, a.Spec.Cache, now); err != nil {
			return false, err
		}
		if hit {
			if _, err := tx.Cache().ReleaseCache(ctx, ak, ck, "hit"); err != nil {
				return false, fmt.Errorf("release cache key %s on a hit: %w", ck, err)
			}
			return true, completeFromCache(ctx, tx, ak, from, e, now)
		}
	}
	if err := tx.Cache().MarkCacheMiss(ctx, ak, from, ck, now); err != nil {
		return false, fmt.Errorf("mark cache key %s missed: %w", ck, err)
	}
	if err := tx.Tasks().CreateTasks(ctx, key, now, s.startedStep(key, params, a, now)); err != nil {
		return false, fmt.Errorf("create tasks: %w", err)
	}
	return false, nil
}

// validEntry reads the entry of key ck for step ak and reports whether it
// is valid for spec's max_age at now.
func validEntry(ctx context.Context, tx *store.Store, ak domain.ActionKey, ck string, spec *domain.CacheSpec,
	now time.Time) (store.CacheEntry, bool, error) {
	e, err := tx.Cache().GetCacheEntry(ctx, ak.Project, ak.Domain, ck)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return e, false, nil
	case err != nil:
		return e, false, fmt.Errorf("read cache entry %s: %w", ck, err)
	}
	return e, domain.CacheEntryValid(e.CreatedAt, e.ExpiresAt, spec.MaxAgeDuration(), now), nil
}

// completeFromCache ends step ak (in phase from) as a hit of entry e.
func completeFromCache(ctx context.Context, tx *store.Store, ak domain.ActionKey, from domain.Phase, e store.CacheEntry,
	now time.Time) error {
	if err := tx.Cache().CompleteFromCache(ctx, ak, from, e, now); err != nil {
		return fmt.Errorf("complete from cache key %s: %w", e.Key, err)
	}
	return nil
}

// finalizeCache is Flyte's finalizeCacheAfterExecution for a step that ran
// (MISS) and is now in phase (a for_each step's items: finalizeItemsCache): SUCCEEDED writes its entry with the step's
// outputs (expiring after its max_age; cache_status POPULATED); any end
// releases a serializable step's reservation ("cache_released", before any
// later event of the transaction) once no attempt of it is live, and
// collects the runs waiting on the key in ev.Waiters. An unfinished step is
// left alone.
func (s *Scheduler) finalizeCache(ctx context.Context, tx *store.Store, ev *Evaluation, act store.Action,
	phase domain.Phase, now time.Time) error {
	c := act.Spec.Cache
	if c != nil && act.Spec.ForEach != nil {
		if act.CacheStatus == nil || *act.CacheStatus != domain.CacheMiss || !phase.IsTerminal() {
			return nil
		}
		return s.finalizeItemsCache(ctx, tx, act, now)
	}
	if c == nil || act.CacheKey == nil || act.CacheStatus == nil || *act.CacheStatus != domain.CacheMiss ||
		!phase.IsTerminal() {
		return nil
	}
	key := keyOf(act)
	if phase == domain.PhaseSucceeded {
		if err := s.populate(ctx, tx, act, now); err != nil {
			return err
		}
	}
	if !c.Serializable {
		return nil
	}
	live, err := tx.Aborts().LiveAttemptsUnder(ctx, key)
	if err != nil {
		return fmt.Errorf("read live attempts of %s: %w", key, err)
	}
	if len(live) > 0 {
		return nil // the evaluation of its last live attempt releases it
	}
	released, err := tx.Cache().ReleaseCache(ctx, key, *act.CacheKey, strings.ToLower(string(phase)))
	if err != nil {
		return fmt.Errorf("release cache key %s of %s: %w", *act.CacheKey, key, err)
	}
	if !released {
		return nil
	}
	waiters, err := tx.Cache().CacheWaiters(ctx, key.Project, key.Domain, *act.CacheKey)
	ev.Waiters = append(ev.Waiters, waiters...)
	if err != nil {
		return fmt.Errorf("read waiters of cache key %s: %w", *act.CacheKey, err)
	}
	return nil
}

// populate writes a SUCCEEDED step's cache entry (its outputs as
// store.StepOutputs reads them) and marks it POPULATED.
func (s *Scheduler) populate(ctx context.Context, tx *store.Store, act store.Action, now time.Time) error {
	key := keyOf(act)
	outs, err := tx.Actions().StepOutputs(ctx, key.RunKey, []string{act.Name})
	if err != nil {
		return fmt.Errorf("read outputs of %s: %w", key, err)
	}
	e := store.CacheEntry{Project: act.Project, Domain: act.Domain, Key: *act.CacheKey, Version: act.Spec.Cache.Version,
		RunName: act.RunName, ActionName: act.Name, Outputs: outs[act.Name]}
	if d := act.Spec.Cache.MaxAgeDuration(); d > 0 {
		at := now.Add(d)
		e.ExpiresAt = &at
	}
	if err := tx.Cache().PutCacheEntry(ctx, e, now); err != nil {
		return fmt.Errorf("put cache entry %s of %s: %w", e.Key, key, err)
	}
	if err := tx.Cache().SetCacheStatus(ctx, key, domain.CachePopulated, now); err != nil {
		return fmt.Errorf("mark cache of %s populated: %w", key, err)
	}
	return nil
}

// holdCacheWait moves the next check of a WAITING_FOR_CACHE step a of a
// suspended run, once due, to WaitBackoffCap from now: no step starts while
// a suspend is in force, and a check that stays due would wake the run on
// every pass. A resume advances the run, which checks it again.
func (s *Scheduler) holdCacheWait(ctx context.Context, tx *store.Store, run store.Run, a store.Action, now time.Time) error {
	if run.SuspendRequestedAt == nil || a.NotBefore == nil || now.Before(*a.NotBefore) || a.CacheKey == nil {
		return nil
	}
	return tx.Cache().WaitForCache(ctx, keyOf(a), domain.Phase(a.Phase), *a.CacheKey, a.CacheWaits,
		now.Add(s.cfg.Workflow.WaitBackoffCap), now)
}

// wakeCacheWaiters pushes the advance of each run waiting on a released
// key, so its step re-checks at once; a lost push is healed by the step's
// wait backoff.
func (s *Scheduler) wakeCacheWaiters(ctx context.Context, runs []domain.RunKey) {
	for _, k := range runs {
		if err := s.queue.Enqueue(ctx, queue.NewRunAdvanceTask(k)); err != nil {
			s.log.Warn("enqueue advance of a cache waiter failed; its backoff wakes it", "run", k.String(), "err", err)
		}
	}
}

// extendReservations is the liveness pass's part of the catalog: it
// extends by ReservationTTL the reservations whose owner still works
// (store.ExtendCacheReservations; a worker that missed ReservationTTL of
// heartbeats no longer counts).
func (s *Scheduler) extendReservations(ctx context.Context) {
	now, ttl := time.Now().UTC(), s.cfg.Cache.ReservationTTL
	if _, err := s.store.Cache().ExtendCacheReservations(ctx, now.Add(-ttl), now.Add(ttl)); err != nil {
		s.log.Warn("extending cache reservations failed", "err", err)
	}
}
