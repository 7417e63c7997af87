package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// hours returns 2026-01-01 at each hour h, UTC.
func hours(hs ...int) []time.Time {
	if len(hs) == 0 {
		return nil
	}
	out := make([]time.Time, len(hs))
	for i, h := range hs {
		out[i] = time.Date(2026, 1, 1, h, 0, 0, 0, time.UTC)
	}
	return out
}

func TestDecideFire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   domain.FireState
		want domain.FireDecision
	}{
		// Temporal SKIP: "don't start anything" while a run is running.
		{"skip: nothing running starts the time",
			domain.FireState{Overlap: domain.OverlapSkip, Due: hours(1)},
			domain.FireDecision{Start: hours(1)}},
		{"skip: running skips the time",
			domain.FireState{Overlap: domain.OverlapSkip, Due: hours(1), Running: 1},
			domain.FireDecision{Skipped: 1}},
		{"skip: catch-up of 3 starts the oldest and skips 2",
			domain.FireState{Overlap: domain.OverlapSkip, Due: hours(1, 2, 3)},
			domain.FireDecision{Start: hours(1), Skipped: 2}},
		{"skip: catch-up of 3 while running skips all",
			domain.FireState{Overlap: domain.OverlapSkip, Due: hours(1, 2, 3), Running: 2},
			domain.FireDecision{Skipped: 3}},
		{"empty overlap is skip",
			domain.FireState{Due: hours(1, 2), Running: 0},
			domain.FireDecision{Start: hours(1), Skipped: 1}},
		{"unknown overlap is skip",
			domain.FireState{Overlap: "terminate_other", Due: hours(1), Running: 1},
			domain.FireDecision{Skipped: 1}},
		{"skip: a leftover buffer drains first and the rest is skipped",
			domain.FireState{Overlap: domain.OverlapSkip, Buffered: hours(0), Due: hours(1)},
			domain.FireDecision{Start: hours(0), Skipped: 1}},

		// Temporal BUFFER_ONE: one start waits for the running run; more
		// are skipped.
		{"buffer_one: running buffers the time",
			domain.FireState{Overlap: domain.OverlapBufferOne, Due: hours(1), Running: 1},
			domain.FireDecision{Buffered: hours(1)}},
		{"buffer_one: running with a full buffer skips",
			domain.FireState{Overlap: domain.OverlapBufferOne, Due: hours(2), Running: 1, Buffered: hours(1)},
			domain.FireDecision{Buffered: hours(1), Skipped: 1}},
		{"buffer_one: catch-up of 3 starts 1, buffers 1, skips 1",
			domain.FireState{Overlap: domain.OverlapBufferOne, Due: hours(1, 2, 3)},
			domain.FireDecision{Start: hours(1), Buffered: hours(2), Skipped: 1}},
		{"buffer_one: nothing running starts the buffered before the due",
			domain.FireState{Overlap: domain.OverlapBufferOne, Due: hours(2), Buffered: hours(1)},
			domain.FireDecision{Start: hours(1), Buffered: hours(2)}},
		{"buffer_one: the buffer drains when the run ends",
			domain.FireState{Overlap: domain.OverlapBufferOne, Buffered: hours(1)},
			domain.FireDecision{Start: hours(1)}},
		{"buffer_one: the buffer waits while running",
			domain.FireState{Overlap: domain.OverlapBufferOne, Buffered: hours(1), Running: 1},
			domain.FireDecision{Buffered: hours(1)}},

		// Temporal BUFFER_ALL: every start waits, in order.
		{"buffer_all: catch-up of 3 starts 1 and buffers 2 in order",
			domain.FireState{Overlap: domain.OverlapBufferAll, Due: hours(1, 2, 3)},
			domain.FireDecision{Start: hours(1), Buffered: hours(2, 3)}},
		{"buffer_all: running buffers every time after the buffer",
			domain.FireState{Overlap: domain.OverlapBufferAll, Due: hours(3, 4), Running: 1, Buffered: hours(1, 2)},
			domain.FireDecision{Buffered: hours(1, 2, 3, 4)}},
		{"buffer_all: the oldest buffered starts when the run ends",
			domain.FireState{Overlap: domain.OverlapBufferAll, Buffered: hours(1, 2, 3)},
			domain.FireDecision{Start: hours(1), Buffered: hours(2, 3)}},
		{"buffer_all: a new time queues behind the buffer",
			domain.FireState{Overlap: domain.OverlapBufferAll, Due: hours(4), Buffered: hours(2, 3)},
			domain.FireDecision{Start: hours(2), Buffered: hours(3, 4)}},

		// Temporal CANCEL_OTHER: cancel the running run and start.
		{"cancel_other: running is cancelled and the time starts",
			domain.FireState{Overlap: domain.OverlapCancelOther, Due: hours(1), Running: 1},
			domain.FireDecision{Start: hours(1), CancelRunning: true}},
		{"cancel_other: nothing running just starts",
			domain.FireState{Overlap: domain.OverlapCancelOther, Due: hours(1)},
			domain.FireDecision{Start: hours(1)}},
		{"cancel_other: catch-up of 3 starts the newest and skips 2",
			domain.FireState{Overlap: domain.OverlapCancelOther, Due: hours(1, 2, 3), Running: 2},
			domain.FireDecision{Start: hours(3), Skipped: 2, CancelRunning: true}},
		{"cancel_other: catch-up of 3 with nothing running",
			domain.FireState{Overlap: domain.OverlapCancelOther, Due: hours(1, 2, 3)},
			domain.FireDecision{Start: hours(3), Skipped: 2}},
		{"cancel_other: nothing due cancels nothing",
			domain.FireState{Overlap: domain.OverlapCancelOther, Running: 1},
			domain.FireDecision{}},
		{"cancel_other: a leftover buffer counts as older times",
			domain.FireState{Overlap: domain.OverlapCancelOther, Buffered: hours(1), Due: hours(2), Running: 1},
			domain.FireDecision{Start: hours(2), Skipped: 1, CancelRunning: true}},

		// Temporal ALLOW_ALL: start every time.
		{"allow_all: catch-up of 3 while running starts all",
			domain.FireState{Overlap: domain.OverlapAllowAll, Due: hours(1, 2, 3), Running: 5},
			domain.FireDecision{Start: hours(1, 2, 3)}},
		{"allow_all: a leftover buffer starts too, first",
			domain.FireState{Overlap: domain.OverlapAllowAll, Due: hours(2), Buffered: hours(1), Running: 1},
			domain.FireDecision{Start: hours(1, 2)}},
		{"allow_all: nothing due",
			domain.FireState{Overlap: domain.OverlapAllowAll, Running: 1},
			domain.FireDecision{}},

		{"nothing due, nothing running, nothing buffered",
			domain.FireState{Overlap: domain.OverlapBufferAll},
			domain.FireDecision{}},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, domain.DecideFire(tc.in), tc.name)
	}
}

func TestDecideFireDoesNotAliasItsInput(t *testing.T) {
	t.Parallel()
	buffered := hours(1, 2)
	due := hours(3)
	d := domain.DecideFire(domain.FireState{Overlap: domain.OverlapBufferAll, Due: due, Buffered: buffered})
	d.Start[0] = time.Time{}
	d.Buffered[0] = time.Time{}
	require.Equal(t, hours(1, 2), buffered)
	require.Equal(t, hours(3), due)
}

// TestFireSequence drives a buffer_all schedule through a run that outlasts
// three scheduled times and then ends: the buffered times start one at a
// time as runs end.
func TestFireSequence(t *testing.T) {
	t.Parallel()
	var buffer, started []time.Time
	running := 0
	step := func(due []time.Time) {
		d := domain.DecideFire(domain.FireState{Overlap: domain.OverlapBufferAll, Due: due, Running: running, Buffered: buffer})
		require.Zero(t, d.Skipped)
		started = append(started, d.Start...)
		running += len(d.Start)
		buffer = d.Buffered
	}
	step(hours(1))
	step(hours(2))
	step(hours(3))
	require.Equal(t, hours(1), started)
	require.Equal(t, hours(2, 3), buffer)
	running-- // the first run ends
	step(nil)
	require.Equal(t, hours(1, 2), started)
	running--
	step(nil)
	running--
	step(nil)
	require.Equal(t, hours(1, 2, 3), started)
	require.Empty(t, buffer)
}

func TestSplitCatchup(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	due := hours(6, 7, 8, 9, 10)
	tests := []struct {
		name       string
		window     time.Duration
		wantKept   []time.Time
		wantMissed int
	}{
		{"all inside", 24 * time.Hour, hours(6, 7, 8, 9, 10), 0},
		{"the cut is inclusive of now - window", 2 * time.Hour, hours(8, 9, 10), 2},
		{"just under", 2*time.Hour - time.Second, hours(9, 10), 3},
		{"a tiny window keeps only now", time.Second, hours(10), 4},
		{"zero is the default of one year", 0, hours(6, 7, 8, 9, 10), 0},
		{"negative is the default", -time.Hour, hours(6, 7, 8, 9, 10), 0},
	}
	for _, tc := range tests {
		kept, missed := domain.SplitCatchup(due, now, tc.window)
		require.Equal(t, tc.wantKept, kept, tc.name)
		require.Equal(t, tc.wantMissed, missed, tc.name)
	}
	old := []time.Time{now.Add(-366 * 24 * time.Hour), now.Add(-364 * 24 * time.Hour)}
	kept, missed := domain.SplitCatchup(old, now, 0)
	require.Equal(t, old[1:], kept, "Temporal's default window is one year")
	require.Equal(t, 1, missed)

	kept, missed = domain.SplitCatchup(nil, now, time.Hour)
	require.Empty(t, kept)
	require.Zero(t, missed)
}

// TestCatchupThenOverlap: a scheduler that was down for three scheduled
// times decides on those still inside the catch-up window.
func TestCatchupThenOverlap(t *testing.T) {
	t.Parallel()
	cal := mustCalendar(t, domain.ScheduleSpec{Cron: "0 * * * *", CatchupWindow: "150m", Overlap: domain.OverlapBufferAll})
	lastFired := time.Date(2026, 1, 1, 5, 0, 0, 0, time.UTC)
	now := time.Date(2026, 1, 1, 9, 30, 0, 0, time.UTC)
	due, more := cal.Between(lastFired, now, 100)
	require.False(t, more)
	require.Equal(t, hours(6, 7, 8, 9), due)

	kept, missed := domain.SplitCatchup(due, now, cal.CatchupWindow())
	require.Equal(t, 1, missed, "06:00 is more than 150m before 09:30")
	d := domain.DecideFire(domain.FireState{Overlap: cal.Overlap(), Due: kept})
	require.Equal(t, domain.FireDecision{Start: hours(7), Buffered: hours(8, 9)}, d)
}

// FuzzDecideFire checks DecideFire's invariants for every policy: each
// buffered and due time ends in exactly one of Start, Buffered and Skipped,
// in order; the single-run policies start at most one run and none while
// one runs; buffer_one keeps at most one; skip, cancel_other and allow_all
// keep none; only cancel_other cancels, and only when something runs and
// something starts.
func FuzzDecideFire(f *testing.F) {
	f.Add(uint8(0), uint8(3), uint8(0), uint8(0))
	f.Add(uint8(1), uint8(3), uint8(1), uint8(1))
	f.Add(uint8(2), uint8(3), uint8(0), uint8(2))
	f.Add(uint8(3), uint8(3), uint8(2), uint8(0))
	f.Add(uint8(4), uint8(3), uint8(9), uint8(4))
	f.Add(uint8(5), uint8(0), uint8(0), uint8(3))
	policies := append([]string{"", "bogus"}, domain.OverlapPolicies...)
	f.Fuzz(func(t *testing.T, policy, nDue, running, nBuffered uint8) {
		buffered := make([]time.Time, int(nBuffered)%20)
		for i := range buffered {
			buffered[i] = time.Unix(int64(i)*60, 0).UTC()
		}
		due := make([]time.Time, int(nDue)%20)
		for i := range due {
			due[i] = time.Unix(int64(len(buffered)+i)*60, 0).UTC()
		}
		in := domain.FireState{Overlap: policies[int(policy)%len(policies)], Due: due, Running: int(running) % 4, Buffered: buffered}
		d := domain.DecideFire(in)

		pending := append(append([]time.Time{}, buffered...), due...)
		require.Equal(t, len(pending), len(d.Start)+len(d.Buffered)+d.Skipped, "every time is accounted for")
		kept := append(append([]time.Time{}, d.Start...), d.Buffered...)
		for i := 1; i < len(d.Start); i++ {
			require.True(t, d.Start[i].After(d.Start[i-1]))
		}
		for i := 1; i < len(d.Buffered); i++ {
			require.True(t, d.Buffered[i].After(d.Buffered[i-1]))
		}
		for _, k := range kept {
			require.Contains(t, pending, k)
		}
		require.Equal(t, in.Overlap == domain.OverlapCancelOther && in.Running > 0 && len(pending) > 0, d.CancelRunning)

		switch in.Overlap {
		case domain.OverlapAllowAll:
			require.Equal(t, len(pending), len(d.Start))
		case domain.OverlapCancelOther:
			require.LessOrEqual(t, len(d.Start), 1)
			require.Empty(t, d.Buffered)
			if len(pending) > 0 {
				require.Equal(t, pending[len(pending)-1], d.Start[0], "the newest starts")
			}
		default: // skip, buffer_one, buffer_all
			require.LessOrEqual(t, len(d.Start), 1, "one run at a time")
			if in.Running > 0 {
				require.Empty(t, d.Start, "nothing starts while a run runs")
			} else if len(pending) > 0 {
				require.Equal(t, pending[0], d.Start[0], "the oldest starts")
			}
			switch in.Overlap {
			case domain.OverlapBufferAll:
				require.Zero(t, d.Skipped)
			case domain.OverlapBufferOne:
				require.LessOrEqual(t, len(d.Buffered), 1)
			default:
				require.Empty(t, d.Buffered)
			}
		}
	})
}
