package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Flyte's catalog: an artifact is a hit while it is younger than its max
// age; here both the writer's expiry and the reader's max_age bound it.
func TestCacheEntryValid(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	later, earlier := now.Add(time.Hour), now.Add(-time.Second)
	for _, tc := range []struct {
		name    string
		created time.Time
		expires *time.Time
		maxAge  time.Duration
		want    bool
	}{
		{"no expiry, any age", now.Add(-24 * time.Hour), nil, 0, true},
		{"unexpired", now.Add(-time.Minute), &later, 0, true},
		{"expired by its writer", now.Add(-time.Minute), &earlier, 0, false},
		{"expires exactly now", now.Add(-time.Minute), &now, 0, false},
		{"younger than the reader's max_age", now.Add(-time.Minute), &later, time.Hour, true},
		{"older than the reader's max_age", now.Add(-2 * time.Hour), nil, time.Hour, false},
	} {
		require.Equal(t, tc.want, CacheEntryValid(tc.created, tc.expires, tc.maxAge, now), tc.name)
	}
}

// An entry expires at its expires_at (the writer's created_at + max_age)
// and from then on; one without (no max_age) never does.
func TestCacheEntryExpired(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	for _, tc := range []struct {
		name    string
		expires *time.Time
		want    bool
	}{
		{"no max_age: never", nil, false},
		{"expires later", at(time.Microsecond), false},
		{"expires exactly now", at(0), true},
		{"expired before now", at(-time.Microsecond), true},
	} {
		require.Equal(t, tc.want, CacheEntryExpired(tc.expires, now), tc.name)
		if tc.want {
			require.False(t, CacheEntryValid(now.Add(-time.Hour), tc.expires, 0, now), "%s: an expired entry is no hit", tc.name)
		}
	}
}

func TestResolveInputs(t *testing.T) {
	t.Parallel()
	inputs := []Input{{From: "a.x", As: "X"}, {From: "b.y", As: "Y"}, {From: "a.z", As: "Z"}}
	require.Equal(t, []string{"a", "b"}, InputProducers(inputs))
	got := ResolveInputs(inputs, map[string]map[string]string{"a": {"x": "1"}})
	require.Equal(t, map[string]string{"X": "1", "Y": "", "Z": ""}, got)
	require.Nil(t, ResolveInputs(nil, nil))
}
