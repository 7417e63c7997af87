package store_test

import (
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// ByKey's plans are made again when the pool's age doubles after they
// were made (at 0.25 s first), and at least every 10 s.
func TestReplanDueAsThePoolAges(t *testing.T) {
	t.Parallel()
	opened := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return opened.Add(d) }
	for _, c := range []struct {
		made, now time.Duration
		due       bool
	}{
		{0, 249 * time.Millisecond, false},
		{0, 250 * time.Millisecond, true},
		{250 * time.Millisecond, 499 * time.Millisecond, false},
		{250 * time.Millisecond, 500 * time.Millisecond, true},
		{4 * time.Second, 7999 * time.Millisecond, false},
		{4 * time.Second, 8 * time.Second, true},
		{time.Hour, time.Hour + 9*time.Second, false},
		{time.Hour, time.Hour + 10*time.Second, true},
	} {
		require.Equal(t, c.due, store.ReplanDue(opened, at(c.made), at(c.now)), "made at %s, now %s", c.made, c.now)
	}
}
