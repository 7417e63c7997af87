package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// testClock is a clock a test moves; its zero value reads the real time.
type testClock struct{ ahead atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *testClock) advance(d time.Duration) { c.ahead.Add(int64(d)) }

// The leader sweeps the cache every SweepInterval, on its clock: an entry
// goes once that clock passes its expiry, one inside its max_age and one
// without max_age stay, and a reservation goes once it expired
// ReservationRetention ago.
func TestLeaderSweepsExpiredCacheEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	redis := redistest.New(t)
	client := asynq.NewClient(redis)
	t.Cleanup(func() { client.Close() })
	log := slog.New(slog.DiscardHandler)
	clock := &testClock{}
	s := New(st, queue.NewEnqueuer(client, log), log, prometheus.NewRegistry(), Config{WorkerGrace: time.Minute,
		Cache: CacheConfig{SweepInterval: 10 * time.Millisecond, SweepBatch: 2, ReservationRetention: time.Hour,
			Now: clock.Now}})

	run := domain.RunKey{Project: "p", Domain: "d", Run: "r"}
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x"}}}
	spec.Normalize()
	_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: run, Spec: spec})
	require.NoError(t, err)
	now := time.Now().UTC()
	put := func(key string, maxAge time.Duration) {
		e := store.CacheEntry{Project: "p", Domain: "d", Key: key, Version: "v1", RunName: "r", ActionName: "a0"}
		if maxAge > 0 {
			at := now.Add(maxAge)
			e.ExpiresAt = &at
		}
		require.NoError(t, st.Cache().PutCacheEntry(ctx, e, now))
	}
	for _, key := range []string{"minute-1", "minute-2", "minute-3"} { // more than one batch
		put(key, time.Minute)
	}
	put("day", 24*time.Hour)
	put("forever", 0)
	reserved, err := st.Cache().ReserveCache(ctx, run.Action("a0"), "forever", now.Add(3*time.Second), now)
	require.NoError(t, err)
	require.True(t, reserved)
	present := func(key string) bool {
		_, err := st.Cache().GetCacheEntry(ctx, "p", "d", key)
		if !errors.Is(err, store.ErrNotFound) {
			require.NoError(t, err)
		}
		return err == nil
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	reservation := func() *store.CacheReservation {
		page, _, err := st.Cache().ListCacheEntries(ctx, store.CacheFilter{Project: "p", Domain: "d", Step: "a0",
			Version: "v1", Run: "r", CreatedBefore: now.Add(time.Second)})
		require.NoError(t, err)
		for _, e := range page {
			if e.Key == "forever" {
				return e.Reservation
			}
		}
		return nil
	}

	clock.advance(2 * time.Minute)
	require.Eventually(t, func() bool { return !present("minute-1") && !present("minute-2") && !present("minute-3") },
		10*time.Second, 10*time.Millisecond, "entries past their max_age are swept")
	require.True(t, present("day"), "an entry inside its max_age stays")
	require.True(t, present("forever"), "an entry without max_age stays")
	require.NotNil(t, reservation(), "a reservation expired less than ReservationRetention ago stays")

	clock.advance(48 * time.Hour)
	require.Eventually(t, func() bool { return !present("day") }, 10*time.Second, 10*time.Millisecond)
	require.True(t, present("forever"), "an entry without max_age never expires")
	require.Eventually(t, func() bool { return reservation() == nil }, 10*time.Second, 10*time.Millisecond,
		"a reservation expired long ago is swept")
}
