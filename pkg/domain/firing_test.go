package domain_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// mins returns 2026-01-01 10:00 plus each of ms minutes, UTC.
func mins(ms ...int) []time.Time {
	if len(ms) == 0 {
		return nil
	}
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		out[i] = time.Date(2026, 1, 1, 10, m, 0, 0, time.UTC)
	}
	return out
}

// minute is mins(m)[0].
func minute(m int) time.Time { return mins(m)[0] }

func TestFireSchedule(t *testing.T) {
	t.Parallel()
	const recheck = time.Second
	now := minute(3).Add(30 * time.Second)
	every := func(spec domain.ScheduleSpec) *domain.Calendar {
		spec.Interval = "1m"
		return mustCalendar(t, spec)
	}
	tests := []struct {
		name string
		in   domain.ScheduleState
		want domain.Firing
	}{
		{"nothing due: the next time is the check",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{}), Cursor: minute(3)},
			domain.Firing{Cursor: minute(3), CheckAt: minute(4)}},
		// Temporal SKIP after downtime: the oldest time inside the window
		// starts, the rest overlap it.
		{"skip: three due start the oldest and skip two",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{}), Cursor: minute(0)},
			domain.Firing{Start: mins(1), Cursor: minute(3), Skipped: 2, CheckAt: minute(4)}},
		{"skip: a running run skips every due time",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{}), Cursor: minute(1), Running: 1},
			domain.Firing{Cursor: minute(3), Skipped: 2, CheckAt: minute(4)}},
		// Temporal BUFFER_ALL: the missed times start one after another.
		{"buffer_all: the oldest starts, the rest wait; the buffer is looked at again soon",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{Overlap: domain.OverlapBufferAll}), Cursor: minute(0)},
			domain.Firing{Start: mins(1), Buffered: mins(2, 3), Cursor: minute(3), CheckAt: now.Add(recheck)}},
		{"buffer_all: the buffer drains one time per ended run",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{Overlap: domain.OverlapBufferAll}), Cursor: minute(3),
				Buffered: mins(2, 3)},
			domain.Firing{Start: mins(2), Buffered: mins(3), Cursor: minute(3), CheckAt: now.Add(recheck)}},
		{"buffer_all: nothing starts while a run runs",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{Overlap: domain.OverlapBufferAll}), Cursor: minute(3),
				Buffered: mins(2, 3), Running: 1},
			domain.Firing{Buffered: mins(2, 3), Cursor: minute(3), CheckAt: now.Add(recheck)}},
		// Temporal's catch-up window: a time older than now - window is
		// not started, only counted.
		{"catch-up window: times before now - window are missed",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{Overlap: domain.OverlapAllowAll, CatchupWindow: "90s"}),
				Cursor: minute(0)},
			domain.Firing{Start: mins(2, 3), Cursor: minute(3), Missed: 1, CheckAt: minute(4)}},
		{"catch-up window: a long outage counts its old times without listing them",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{Overlap: domain.OverlapAllowAll, CatchupWindow: "90s"}),
				Cursor: minute(0).Add(-24 * time.Hour)},
			domain.Firing{Start: mins(2, 3), Cursor: minute(3), Missed: 24*60 + 1, CheckAt: minute(4)}},
		{"cancel_other: the newest starts and the running runs are cancelled",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{Overlap: domain.OverlapCancelOther}), Cursor: minute(1),
				Running: 2},
			domain.Firing{Start: mins(3), CancelRunning: true, Cursor: minute(3), Skipped: 1, CheckAt: minute(4)}},
		{"paused: no automatic time, and nothing to look at again",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{}), Cursor: minute(0), Paused: true},
			domain.Firing{Cursor: minute(0)}},
		// Temporal takes manual actions (trigger, backfill) while paused.
		{"paused: a pending time still starts",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{}), Cursor: minute(0), Paused: true,
				Pending: []domain.PendingTime{{At: now.Truncate(time.Second)}}},
			domain.Firing{Start: []time.Time{now.Truncate(time.Second)}, Cursor: minute(0)}},
		{"a trigger at an automatic time starts it once",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{}), Cursor: minute(2),
				Pending: []domain.PendingTime{{At: minute(3)}}},
			domain.Firing{Start: mins(3), Cursor: minute(3), CheckAt: minute(4)}},
		{"a pending time ignores the catch-up window",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{CatchupWindow: "1m"}), Cursor: minute(3),
				Pending: []domain.PendingTime{{At: minute(-600)}}},
			domain.Firing{Start: mins(-600), Cursor: minute(3), CheckAt: minute(4)}},
		// Temporal: a backfill or a trigger carries its own overlap policy.
		{"a backfill's allow_all starts beside a skip schedule's running run",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{}), Cursor: minute(3), Running: 1,
				Pending: []domain.PendingTime{{At: minute(-2), Overlap: domain.OverlapAllowAll},
					{At: minute(-1), Overlap: domain.OverlapAllowAll}}},
			domain.Firing{Start: mins(-2, -1), Cursor: minute(3), CheckAt: minute(4)}},
		{"a backfill's buffer_all after the schedule's start waits for it",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{}), Cursor: minute(2),
				Pending: []domain.PendingTime{{At: minute(-2), Overlap: domain.OverlapBufferAll}}},
			domain.Firing{Start: mins(3), Buffered: mins(-2), Cursor: minute(3), CheckAt: now.Add(recheck)}},
		{"a trigger's cancel_other cancels only the runs running before",
			domain.ScheduleState{Calendar: every(domain.ScheduleSpec{}), Cursor: minute(3), Running: 1,
				Pending: []domain.PendingTime{{At: minute(3).Add(10 * time.Second), Overlap: domain.OverlapCancelOther}}},
			domain.Firing{Start: []time.Time{minute(3).Add(10 * time.Second)}, CancelRunning: true, Cursor: minute(3),
				CheckAt: minute(4)}},
	}
	for _, tc := range tests {
		got := domain.FireSchedule(tc.in, now, recheck)
		require.Equal(t, tc.want, got, tc.name)
	}
}

func TestFireScheduleJitter(t *testing.T) {
	t.Parallel()
	cal := mustCalendar(t, domain.ScheduleSpec{Interval: "1m", Jitter: "50s"})
	const id = "p/d/nightly"
	at := minute(1)
	due := domain.DueAt(cal, id, at)
	require.Equal(t, at.Add(domain.JitterFor(id, at, 50*time.Second)), due)

	early := domain.FireSchedule(domain.ScheduleState{ID: id, Calendar: cal, Cursor: minute(0)}, due.Add(-time.Nanosecond), 0)
	require.Empty(t, early.Start, "a time starts once its jitter passed")
	require.Equal(t, minute(0), early.Cursor)
	require.Equal(t, due, early.CheckAt)

	onTime := domain.FireSchedule(domain.ScheduleState{ID: id, Calendar: cal, Cursor: minute(0)}, due, 0)
	require.Equal(t, mins(1), onTime.Start)
	require.Equal(t, domain.DueAt(cal, id, minute(2)), onTime.CheckAt)

	// Temporal bounds the jitter by the time to the next scheduled time:
	// a bound larger than the interval still keeps the times in order.
	wide := mustCalendar(t, domain.ScheduleSpec{Interval: "1m", Jitter: "1h"})
	for m := range 100 {
		d1, d2 := domain.DueAt(wide, id, minute(m)), domain.DueAt(wide, id, minute(m+1))
		require.True(t, d1.Before(minute(m+1)), "minute %d is due before the next scheduled time", m)
		require.True(t, d1.Before(d2))
	}
}

func TestFireScheduleFarBehind(t *testing.T) {
	t.Parallel()
	cal := mustCalendar(t, domain.ScheduleSpec{Interval: "1s", Overlap: domain.OverlapAllowAll})
	now := minute(0)
	s := domain.ScheduleState{Calendar: cal, Cursor: now.Add(-time.Hour)}
	var started []time.Time
	for range 4 {
		f := domain.FireSchedule(s, now, time.Second)
		started = append(started, f.Start...)
		require.LessOrEqual(t, len(f.Start), domain.MaxFiringTimes)
		s.Cursor = f.Cursor
		if f.CheckAt.After(now) {
			break
		}
		require.Equal(t, now, f.CheckAt, "a schedule further behind than one firing is decided again at once")
	}
	require.Len(t, started, 3600)
	require.Equal(t, now.Add(-time.Hour+time.Second), started[0])
	require.Equal(t, now, started[len(started)-1])
	require.True(t, slices.IsSortedFunc(started, time.Time.Compare))

	// A cron's missed times are counted a bounded number per firing.
	hourly := mustCalendar(t, domain.ScheduleSpec{Cron: "@hourly", CatchupWindow: "30m"})
	f := domain.FireSchedule(domain.ScheduleState{Calendar: hourly, Cursor: minute(0).Add(-48 * time.Hour)}, minute(3), 0)
	require.Equal(t, 47, f.Missed, "the 47 hours after the cursor and before 09:33 are older than the window")
	require.Equal(t, mins(0), f.Start)
	require.Equal(t, minute(0), f.Cursor)
	require.Equal(t, minute(60), f.CheckAt)
}

func TestFireScheduleBufferBound(t *testing.T) {
	t.Parallel()
	cal := mustCalendar(t, domain.ScheduleSpec{Interval: "1m", Overlap: domain.OverlapBufferAll})
	full := make([]time.Time, domain.MaxBuffered)
	for i := range full {
		full[i] = minute(-domain.MaxBuffered + i)
	}
	f := domain.FireSchedule(domain.ScheduleState{Calendar: cal, Cursor: minute(2), Running: 1, Buffered: full}, minute(3), 0)
	require.Equal(t, 1, f.Skipped, "a time past a full buffer is skipped")
	require.Equal(t, full, f.Buffered)
}

func TestAddPending(t *testing.T) {
	t.Parallel()
	p, ok := domain.AddPending(nil, mins(3, 1), "")
	require.True(t, ok)
	require.Equal(t, []domain.PendingTime{{At: minute(1)}, {At: minute(3)}}, p)

	p, ok = domain.AddPending(p, mins(2, 3), domain.OverlapAllowAll)
	require.True(t, ok)
	require.Equal(t, []domain.PendingTime{{At: minute(1)}, {At: minute(2), Overlap: domain.OverlapAllowAll}, {At: minute(3)}}, p,
		"a time already pending keeps its entry")

	many := make([]time.Time, domain.MaxBackfillTimes-2)
	for i := range many {
		many[i] = minute(100 + i)
	}
	same, ok := domain.AddPending(p, many, "")
	require.False(t, ok, "more than MaxBackfillTimes pending")
	require.Equal(t, p, same)
}

// FuzzFireSchedule checks that firings at any sequence of moments start
// each automatic time of an allow_all schedule exactly once, in order, and
// never one that is not yet due; and that a firing's cursor never goes
// back.
func FuzzFireSchedule(f *testing.F) {
	f.Add(uint16(60), uint16(0), int64(0), uint16(10), uint16(200), uint16(7))
	f.Add(uint16(1), uint16(5), int64(1234567), uint16(0), uint16(3000), uint16(1))
	f.Add(uint16(7), uint16(30), int64(-99), uint16(1), uint16(1), uint16(0))
	f.Fuzz(func(t *testing.T, interval, jitter uint16, start int64, firstStep, step, steps uint16) {
		spec := domain.ScheduleSpec{Interval: (time.Duration(interval%600+1) * time.Second).String(),
			Jitter: (time.Duration(jitter%120) * time.Second).String(), Overlap: domain.OverlapAllowAll}
		cal := mustCalendar(t, spec)
		const id = "p/d/s"
		t0 := time.Unix(start%(1<<40), 0).UTC()
		s := domain.ScheduleState{ID: id, Calendar: cal, Cursor: t0}
		now := t0.Add(time.Duration(firstStep) * time.Millisecond * 7)
		var started []time.Time
		for range int(steps%20) + 1 {
			f := domain.FireSchedule(s, now, time.Second)
			require.False(t, f.Cursor.Before(s.Cursor), "the cursor never goes back")
			for _, at := range f.Start {
				require.False(t, domain.DueAt(cal, id, at).After(now), "%s started before it was due at %s", at, now)
			}
			started = append(started, f.Start...)
			s.Cursor = f.Cursor
			if f.CheckAt.After(now) {
				now = now.Add(time.Duration(step) * time.Millisecond * 13)
			}
		}
		want, _ := domain.DueTimes(cal, id, t0, now, 1<<20)
		if n := len(started); n < len(want) {
			want = want[:n] // the last firing may have left times for the next
		}
		require.True(t, slices.Equal(want, started), "every due time starts once, in order: want %v, started %v", want, started)
	})
}
