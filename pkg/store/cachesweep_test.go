package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// cacheStore is a store with runs r and r2 of one started step s, which
// the entries it puts name as their writers.
func cacheStore(t *testing.T) *store.Store {
	t.Helper()
	st := storetest.New(t)
	for _, name := range []string{"r", "r2"} {
		key := newRun(t, st, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x"}}})
		storetest.StartSteps(t, st, key)
	}
	return st
}

// putEntry writes entry key of p/d, version, by run/s, at created, expiring
// at expires (nil: never).
func putEntry(t *testing.T, st *store.Store, key, version, run string, created time.Time, expires *time.Time) {
	t.Helper()
	require.NoError(t, st.Cache().PutCacheEntry(context.Background(), store.CacheEntry{Project: "p", Domain: "d",
		Key: key, Version: version, RunName: run, ActionName: "s", ExpiresAt: expires}, created))
}

// cacheKeys returns the keys of p/d's entries, newest first.
func cacheKeys(t *testing.T, st *store.Store) []string {
	t.Helper()
	page, _, err := st.Cache().ListCacheEntries(context.Background(), store.CacheFilter{Project: "p", Domain: "d", Limit: 500})
	require.NoError(t, err)
	keys := make([]string, len(page))
	for i, e := range page {
		keys[i] = e.Key
	}
	return keys
}

// The sweep deletes the entries past their writer's max_age, as
// domain.CacheEntryExpired decides at the same instant, and nothing else:
// one inside its max_age and one without max_age survive.
func TestDeleteExpiredCacheEntriesFollowsTheExpiryRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := cacheStore(t)
	now := time.Now().UTC().Truncate(time.Microsecond) // as Postgres keeps it
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	entries := map[string]*time.Time{
		"forever":  nil,
		"fresh":    at(time.Hour),
		"almost":   at(time.Microsecond),
		"boundary": at(0),
		"expired":  at(-time.Second),
	}
	for key, exp := range entries {
		putEntry(t, st, key, "v1", "r", now.Add(-2*time.Hour), exp)
	}
	n, err := st.Cache().DeleteExpiredCacheEntries(ctx, now, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	for key, exp := range entries {
		_, err := st.Cache().GetCacheEntry(ctx, "p", "d", key)
		if domain.CacheEntryExpired(exp, now) {
			require.ErrorIs(t, err, store.ErrNotFound, "%s is expired: deleted", key)
		} else {
			require.NoError(t, err, "%s is not expired: kept", key)
		}
	}
	n, err = st.Cache().DeleteExpiredCacheEntries(ctx, now, 1000)
	require.NoError(t, err)
	require.Zero(t, n, "a second sweep at the same instant finds none")
}

// A batch deletes at most its limit, the earliest expired first.
func TestDeleteExpiredCacheEntriesInBatchesEarliestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := cacheStore(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	for i := range 5 {
		exp := now.Add(-time.Duration(i+1) * time.Minute) // k4 expired first
		putEntry(t, st, fmt.Sprintf("k%d", i), "v1", "r", now.Add(-time.Hour), &exp)
	}
	n, err := st.Cache().DeleteExpiredCacheEntries(ctx, now, 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.ElementsMatch(t, []string{"k0", "k1", "k2"}, cacheKeys(t, st))
	n, err = st.Cache().DeleteExpiredCacheEntries(ctx, now, 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, []string{"k0"}, cacheKeys(t, st))
	n, err = st.Cache().DeleteExpiredCacheEntries(ctx, now, 2)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a short batch: none left")
}

// Reservations expired before the cut are deleted; a live one and one
// expired since the cut stay.
func TestDeleteLapsedCacheReservations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := cacheStore(t)
	owner := domain.RunKey{Project: "p", Domain: "d", Run: "r"}.Action("s")
	now := time.Now().UTC().Truncate(time.Microsecond)
	for key, exp := range map[string]time.Time{"live": now.Add(time.Minute), "recent": now.Add(-time.Minute),
		"lapsed": now.Add(-2 * time.Hour)} {
		ok, err := st.Cache().ReserveCache(ctx, owner, key, exp, exp.Add(-3*time.Second))
		require.NoError(t, err)
		require.True(t, ok)
	}
	n, err := st.Cache().DeleteLapsedCacheReservations(ctx, now.Add(-time.Hour), 1000)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	released, err := st.Cache().ReleaseCache(ctx, owner, "lapsed", "test")
	require.NoError(t, err)
	require.False(t, released, "the lapsed reservation is gone")
	for _, key := range []string{"live", "recent"} {
		released, err := st.Cache().ReleaseCache(ctx, owner, key, "test")
		require.NoError(t, err)
		require.True(t, released, "%s stays", key)
	}
}

// DeleteCacheEntries deletes what the filter selects, whatever expiry,
// oldest first in batches that each resume after the last one's mark, ties
// of created_at included; the list reads the same filter.
func TestDeleteCacheEntriesByFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := cacheStore(t)
	base := time.Now().UTC().Truncate(time.Microsecond).Add(-time.Hour)
	for i := range 3 { // v1 by r at base (a tie), one v2 between
		putEntry(t, st, fmt.Sprintf("v1-%d", i), "v1", "r", base, nil)
	}
	putEntry(t, st, "v2", "v2", "r", base.Add(time.Second), nil)
	putEntry(t, st, "v1-late", "v1", "r", base.Add(2*time.Second), nil)
	putEntry(t, st, "v1-r2", "v1", "r2", base.Add(3*time.Second), nil)

	f := store.CacheFilter{Project: "p", Domain: "d", Version: "v1", Run: "r"}
	listed, _, err := st.Cache().ListCacheEntries(ctx, f)
	require.NoError(t, err)
	require.Len(t, listed, 4, "the list reads the filter")
	n, mark, err := st.Cache().DeleteCacheEntries(ctx, f, store.CacheMark{Key: "ignored"}, 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	requireMark(t, store.CacheMark{CreatedAt: base, Key: "v1-1"}, mark, "ties go by key descending")
	require.ElementsMatch(t, []string{"v1-0", "v2", "v1-late", "v1-r2"}, cacheKeys(t, st))
	n, mark, err = st.Cache().DeleteCacheEntries(ctx, f, store.CacheMark{CreatedAt: base, Key: "v1-0"}, 2)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a batch starts after its mark: v1-0 stays")
	requireMark(t, store.CacheMark{CreatedAt: base.Add(2 * time.Second), Key: "v1-late"}, mark)
	n, mark, err = st.Cache().DeleteCacheEntries(ctx, f, store.CacheMark{}, 2)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	requireMark(t, store.CacheMark{CreatedAt: base, Key: "v1-0"}, mark)
	n, next, err := st.Cache().DeleteCacheEntries(ctx, f, mark, 2)
	require.NoError(t, err)
	require.Zero(t, n)
	requireMark(t, mark, next, "an empty batch keeps its mark")
	require.ElementsMatch(t, []string{"v2", "v1-r2"}, cacheKeys(t, st))

	n, _, err = st.Cache().DeleteCacheEntries(ctx, store.CacheFilter{Project: "p", Domain: "d",
		CreatedBefore: base.Add(3 * time.Second)}, store.CacheMark{}, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "created_before is exclusive")
	require.Equal(t, []string{"v1-r2"}, cacheKeys(t, st))
	n, _, err = st.Cache().DeleteCacheEntries(ctx, store.CacheFilter{Project: "p", Domain: "other"}, store.CacheMark{}, 1000)
	require.NoError(t, err)
	require.Zero(t, n, "another domain's filter deletes nothing here")
	n, _, err = st.Cache().DeleteCacheEntries(ctx, store.CacheFilter{Project: "p", Domain: "d", Step: "s"}, store.CacheMark{}, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Empty(t, cacheKeys(t, st))
}

// requireMark requires got to be the mark want, as instants.
func requireMark(t *testing.T, want, got store.CacheMark, msg ...any) {
	t.Helper()
	require.Equal(t, want.Key, got.Key, msg...)
	require.True(t, want.CreatedAt.Equal(got.CreatedAt), "mark at %s, want %s", got.CreatedAt, want.CreatedAt)
}
