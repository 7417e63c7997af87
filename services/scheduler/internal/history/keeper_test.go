package history

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func day(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// clock is a settable Config.Now.
type clock struct{ at atomic.Pointer[time.Time] }

func newClock(t time.Time) *clock { c := &clock{}; c.set(t); return c }
func (c *clock) set(t time.Time)  { c.at.Store(&t) }
func (c *clock) now() time.Time   { return *c.at.Load() }

// has reports whether run_events has a partition of day d.
func has(t *testing.T, st *store.Store, d time.Time) bool {
	t.Helper()
	ps, err := st.History().Partitions(context.Background(), "run_events")
	require.NoError(t, err)
	for _, p := range ps {
		if p.Day.Equal(d) {
			return true
		}
	}
	return false
}

func names(ps []store.Partition) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Name())
	}
	return out
}

// A round makes today's and the next Ahead days' partitions, and drops
// those whose whole day is before the horizon DropBefore gives; with
// KeepAll it drops none.
func TestRoundMakesTheDaysAheadAndDropsBehindTheHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	c := newClock(day(2025, 3, 6).Add(12 * time.Hour))
	keep := New(st, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), Config{Ahead: 2, Now: c.now})
	res, err := keep.Round(ctx)
	require.NoError(t, err)
	require.Len(t, res.Made, 3*len(store.HistoryTables))
	require.Empty(t, res.Dropped)

	c.set(day(2025, 3, 10).Add(12 * time.Hour))
	res, err = keep.Round(ctx)
	require.NoError(t, err)
	require.Contains(t, names(res.Made), "run_events_p20250312")
	require.Empty(t, res.Dropped, "KeepAll")

	reg := prometheus.NewRegistry()
	drop := New(st, slog.New(slog.DiscardHandler), reg, Config{Ahead: 2, Now: c.now,
		DropBefore: func(now time.Time) (time.Time, bool) { return now.AddDate(0, 0, -2), true }})
	res, err = drop.Round(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Made)
	var want []string
	for _, table := range store.HistoryTables {
		want = append(want, table+"_p20250306", table+"_p20250307")
	}
	require.Equal(t, want, names(res.Dropped), "the 8th ends after the horizon, the 8th at noon")
	require.True(t, has(t, st, day(2025, 3, 8)))
	require.Equal(t, 2.0, testutil.ToFloat64(drop.dropped.WithLabelValues("attempt_logs")))
}

// Run makes the partitions once its replica leads, then again each
// Interval of its clock, and at once when it leads again, however soon.
func TestRunRoundsWhileLeading(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	c := newClock(day(2033, 1, 1).Add(time.Hour))
	keep := New(st, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		Config{Ahead: 1, Interval: time.Hour, Poll: 5 * time.Millisecond, Now: c.now})
	var leading atomic.Bool
	var notLeading atomic.Int64 // how often Run found its replica not leading
	leads := func() bool {
		if leading.Load() {
			return true
		}
		notLeading.Add(1)
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { keep.Run(ctx, leads) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	made := func(d time.Time) {
		t.Helper()
		require.Eventually(t, func() bool { return has(t, st, d) }, 10*time.Second, 5*time.Millisecond, "partition of %s", d)
	}

	leading.Store(true)
	made(day(2033, 1, 2))
	c.set(day(2033, 1, 2).Add(23*time.Hour + 30*time.Minute)) // more than an Interval later
	made(day(2033, 1, 3))

	leading.Store(false)
	seen := notLeading.Load()
	require.Eventually(t, func() bool { return notLeading.Load() > seen }, 10*time.Second, time.Millisecond)
	c.set(day(2033, 1, 3).Add(10 * time.Minute)) // 40 minutes after the last round
	leading.Store(true)
	made(day(2033, 1, 4))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{}.Validate())
	require.NoError(t, Config{Ahead: 90, Interval: time.Minute}.Validate())
	require.Error(t, Config{Ahead: -1}.Validate())
	require.Error(t, Config{Ahead: 91}.Validate())
	require.Error(t, Config{Interval: -time.Second}.Validate())
	require.Error(t, Config{Poll: -time.Second}.Validate())
}

// OldestRun's horizon is an hour before the oldest run left: the days
// before it are dropped, the oldest run's day stays; with no run left it
// is an hour before now.
func TestOldestRunHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 2})
	log := slog.New(slog.DiscardHandler)
	now := time.Now().UTC()
	horizon := OldestRun(st, log)
	before, ok := horizon(now)
	require.True(t, ok)
	require.Equal(t, now.Add(-time.Hour), before, "no run: an hour before now")

	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "t", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: domain.RunKey{Project: "p", Domain: "d", Run: "old"}, Spec: spec})
	require.NoError(t, err)
	created := now.Add(-72 * time.Hour).Truncate(time.Microsecond)
	_, err = db.Exec(`UPDATE runs SET created_at = $1`, created)
	require.NoError(t, err)
	before, ok = horizon(now)
	require.True(t, ok)
	require.True(t, before.Equal(created.Add(-time.Hour)), "%s", before)

	k := New(st, log, prometheus.NewRegistry(), Config{Ahead: 1, Now: func() time.Time { return now.AddDate(0, 0, -6) }})
	_, err = k.Round(ctx)
	require.NoError(t, err)
	k = New(st, log, prometheus.NewRegistry(), Config{Ahead: 1, Now: func() time.Time { return now }, DropBefore: horizon})
	_, err = k.Round(ctx)
	require.NoError(t, err)
	d := func(ago int) time.Time { return now.AddDate(0, 0, -ago).Truncate(24 * time.Hour) }
	require.False(t, has(t, st, d(6)), "six days ago: before the oldest run")
	require.True(t, has(t, st, d(0)), "today")
}
