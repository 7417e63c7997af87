package domain_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// utc parses an RFC 3339 time.
func utc(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return v.UTC()
}

// utcs parses RFC 3339 times.
func utcs(t testing.TB, ss ...string) []time.Time {
	t.Helper()
	out := make([]time.Time, len(ss))
	for i, s := range ss {
		out[i] = utc(t, s)
	}
	return out
}

// series returns the n scheduled times of cal after from.
func series(cal *domain.Calendar, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = cal.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

func TestCalendarIntervalAlignsToTheEpoch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		interval, after, want string
	}{
		// Temporal: an interval fires at every multiple of it since the
		// Unix epoch (phase 0), whenever the schedule was created.
		{"1h", "2026-03-05T10:17:42Z", "2026-03-05T11:00:00Z"},
		{"1h", "2026-03-05T10:00:00Z", "2026-03-05T11:00:00Z"},
		{"1h", "2026-03-05T09:59:59.999Z", "2026-03-05T10:00:00Z"},
		{"15m", "2026-03-05T10:17:42Z", "2026-03-05T10:30:00Z"},
		{"90s", "1970-01-01T00:00:00Z", "1970-01-01T00:01:30Z"},
		{"90s", "1970-01-01T00:01:29Z", "1970-01-01T00:01:30Z"},
		{"7s", "2026-03-05T10:17:42Z", time.Unix((utc(t, "2026-03-05T10:17:42Z").Unix()/7+1)*7, 0).UTC().Format(time.RFC3339)},
		// A day is 24h of UTC, so daily intervals fire at 00:00 UTC.
		{"24h", "2026-03-05T10:17:42Z", "2026-03-06T00:00:00Z"},
		// Before the epoch the multiples are still those of the interval.
		{"1h", "1969-12-31T22:30:00Z", "1969-12-31T23:00:00Z"},
		{"1h", "1969-12-31T23:00:00Z", "1970-01-01T00:00:00Z"},
	}
	for _, tc := range tests {
		cal := mustCalendar(t, domain.ScheduleSpec{Interval: tc.interval})
		require.Equal(t, utc(t, tc.want), cal.Next(utc(t, tc.after)), "interval %s after %s", tc.interval, tc.after)
	}
}

func TestCalendarIntervalIgnoresTimezone(t *testing.T) {
	t.Parallel()
	cal := mustCalendar(t, domain.ScheduleSpec{Interval: "1h", Timezone: "Asia/Kolkata"})
	require.Equal(t, utc(t, "2026-03-05T11:00:00Z"), cal.Next(utc(t, "2026-03-05T10:17:42Z")))
}

func TestCalendarCronUTC(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cron, after string
		want        []string
	}{
		{"0 3 * * *", "2026-12-01T12:00:00Z", []string{"2026-12-02T03:00:00Z", "2026-12-03T03:00:00Z"}},
		{"0 3 * * *", "2026-12-02T03:00:00Z", []string{"2026-12-03T03:00:00Z"}},
		{"0 3 * * *", "2026-12-02T02:59:59.5Z", []string{"2026-12-02T03:00:00Z"}},
		{"*/20 * * * *", "2026-12-02T03:05:00Z", []string{"2026-12-02T03:20:00Z", "2026-12-02T03:40:00Z", "2026-12-02T04:00:00Z"}},
		{"@hourly", "2026-12-02T03:05:00Z", []string{"2026-12-02T04:00:00Z", "2026-12-02T05:00:00Z"}},
		{"@daily", "2026-12-02T03:05:00Z", []string{"2026-12-03T00:00:00Z"}},
		{"@weekly", "2026-12-02T03:05:00Z", []string{"2026-12-06T00:00:00Z", "2026-12-13T00:00:00Z"}},
		{"@monthly", "2026-12-02T03:05:00Z", []string{"2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z"}},
		{"@yearly", "2026-12-02T03:05:00Z", []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"0 0 29 2 *", "2026-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		// Vixie cron: with both day fields restricted, either may match.
		{"0 0 13 * 5", "2026-02-01T00:00:00Z", []string{"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"}},
	}
	for _, tc := range tests {
		cal := mustCalendar(t, domain.ScheduleSpec{Cron: tc.cron})
		require.Equal(t, utcs(t, tc.want...), series(cal, utc(t, tc.after), len(tc.want)), "cron %q after %s", tc.cron, tc.after)
	}
}

func TestCalendarNextIsZeroBeyondFiveYears(t *testing.T) {
	t.Parallel()
	// 2100 is not a leap year: after Feb 2096 the next Feb 29 is in 2104,
	// beyond robfig/cron's five-year horizon.
	cal := mustCalendar(t, domain.ScheduleSpec{Cron: "0 0 29 2 *"})
	require.True(t, cal.Next(utc(t, "2097-01-01T00:00:00Z")).IsZero())
	require.Equal(t, utc(t, "2104-02-29T00:00:00Z"), cal.Next(utc(t, "2100-01-01T00:00:00Z")))
}

func TestCalendarBetween(t *testing.T) {
	t.Parallel()
	cal := mustCalendar(t, domain.ScheduleSpec{Interval: "1h"})
	after, upTo := utc(t, "2026-03-05T10:00:00Z"), utc(t, "2026-03-05T13:00:00Z")
	tests := []struct {
		name     string
		after    time.Time
		upTo     time.Time
		max      int
		want     []string
		wantMore bool
	}{
		{"(after, upTo] excludes after and includes upTo", after, upTo, 10,
			[]string{"2026-03-05T11:00:00Z", "2026-03-05T12:00:00Z", "2026-03-05T13:00:00Z"}, false},
		{"exactly max", after, upTo, 3,
			[]string{"2026-03-05T11:00:00Z", "2026-03-05T12:00:00Z", "2026-03-05T13:00:00Z"}, false},
		{"max cuts", after, upTo, 2, []string{"2026-03-05T11:00:00Z", "2026-03-05T12:00:00Z"}, true},
		{"max 0 says whether any", after, upTo, 0, nil, true},
		{"negative max", after, upTo, -1, nil, true},
		{"empty range", after, after, 10, nil, false},
		{"upTo before after", upTo, after, 10, nil, false},
		{"max 0 on a range with none", after, after.Add(59 * time.Minute), 0, nil, false},
	}
	for _, tc := range tests {
		got, more := cal.Between(tc.after, tc.upTo, tc.max)
		if tc.want == nil {
			require.Empty(t, got, tc.name)
		} else {
			require.Equal(t, utcs(t, tc.want...), got, tc.name)
		}
		require.Equal(t, tc.wantMore, more, tc.name)
	}
}

func TestBackfillTimes(t *testing.T) {
	t.Parallel()
	hourly := mustCalendar(t, domain.ScheduleSpec{Cron: "0 * * * *"})
	start, end := utc(t, "2026-03-05T10:00:00Z"), utc(t, "2026-03-05T13:00:00Z")

	got, errs := domain.BackfillTimes(hourly, start, end)
	require.Empty(t, errs)
	require.Equal(t, utcs(t, "2026-03-05T10:00:00Z", "2026-03-05T11:00:00Z", "2026-03-05T12:00:00Z", "2026-03-05T13:00:00Z"), got,
		"start and end both inclusive")

	got, errs = domain.BackfillTimes(hourly, start.Add(time.Nanosecond), end.Add(-time.Nanosecond))
	require.Empty(t, errs)
	require.Equal(t, utcs(t, "2026-03-05T11:00:00Z", "2026-03-05T12:00:00Z"), got)

	got, errs = domain.BackfillTimes(hourly, start, start)
	require.Empty(t, errs)
	require.Equal(t, []time.Time{start}, got, "a range of one instant")

	got, errs = domain.BackfillTimes(hourly, start.Add(time.Minute), start.Add(2*time.Minute))
	require.Empty(t, errs)
	require.Empty(t, got)

	_, errs = domain.BackfillTimes(hourly, end, start)
	require.Len(t, errs, 1)
	require.Equal(t, "end", errs[0].Field)
	require.Contains(t, errs[0].Message, "must not be before start 2026-03-05T13:00:00Z; got 2026-03-05T10:00:00Z")

	minutely := mustCalendar(t, domain.ScheduleSpec{Interval: "1s"})
	got, errs = domain.BackfillTimes(minutely, start, start.Add((domain.MaxBackfillTimes-1)*time.Second))
	require.Empty(t, errs)
	require.Len(t, got, domain.MaxBackfillTimes, "MaxBackfillTimes itself is allowed")

	_, errs = domain.BackfillTimes(minutely, start, start.Add(domain.MaxBackfillTimes*time.Second))
	require.Len(t, errs, 1)
	require.Equal(t, "end", errs[0].Field)
	require.Contains(t, errs[0].Message, "more than 10000 scheduled times")
}

// TestCalendarDST pins cron times across the 2026 transitions of two zones,
// one east and one west of Greenwich (time.Date resolves the two
// differently). A cron reads the zone's wall clock: a wall time a
// spring-forward skips fires once, moved forward by the skip; one a
// fall-back repeats fires once, at its first occurrence; no instant fires
// twice.
//
//	Europe/Berlin     2026-03-29 01:00Z: 02:00 CET -> 03:00 CEST
//	                  2026-10-25 01:00Z: 03:00 CEST -> 02:00 CET
//	America/New_York  2026-03-08 07:00Z: 02:00 EST -> 03:00 EDT
//	                  2026-11-01 06:00Z: 02:00 EDT -> 01:00 EST
func TestCalendarDST(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, zone, cron, after string
		// want are the next times as "UTC = local".
		want []string
	}{
		{"Berlin spring: 02:30 runs once, at 03:30 CEST", "Europe/Berlin", "30 2 * * *", "2026-03-27T00:00:00Z", []string{
			"2026-03-27T01:30:00Z = 02:30 CET",
			"2026-03-28T01:30:00Z = 02:30 CET",
			"2026-03-29T01:30:00Z = 03:30 CEST",
			"2026-03-30T00:30:00Z = 02:30 CEST",
		}},
		{"Berlin fall: 02:30 runs once, at its first occurrence", "Europe/Berlin", "30 2 * * *", "2026-10-23T00:00:00Z", []string{
			"2026-10-23T00:30:00Z = 02:30 CEST",
			"2026-10-24T00:30:00Z = 02:30 CEST",
			"2026-10-25T00:30:00Z = 02:30 CEST",
			"2026-10-26T01:30:00Z = 02:30 CET",
		}},
		{"New York spring: 02:30 runs once, at 03:30 EDT", "America/New_York", "30 2 * * *", "2026-03-06T00:00:00Z", []string{
			"2026-03-06T07:30:00Z = 02:30 EST",
			"2026-03-07T07:30:00Z = 02:30 EST",
			"2026-03-08T07:30:00Z = 03:30 EDT",
			"2026-03-09T06:30:00Z = 02:30 EDT",
		}},
		{"New York fall: 01:30 runs once, at its first occurrence", "America/New_York", "30 1 * * *", "2026-10-30T00:00:00Z", []string{
			"2026-10-30T05:30:00Z = 01:30 EDT",
			"2026-10-31T05:30:00Z = 01:30 EDT",
			"2026-11-01T05:30:00Z = 01:30 EDT",
			"2026-11-02T06:30:00Z = 01:30 EST",
		}},

		{"Berlin spring hourly: 02:00 moves onto 03:00, once", "Europe/Berlin", "0 * * * *", "2026-03-28T23:30:00Z", []string{
			"2026-03-29T00:00:00Z = 01:00 CET",
			"2026-03-29T01:00:00Z = 03:00 CEST",
			"2026-03-29T02:00:00Z = 04:00 CEST",
			"2026-03-29T03:00:00Z = 05:00 CEST",
		}},
		{"Berlin fall hourly: 02:00 once", "Europe/Berlin", "0 * * * *", "2026-10-24T22:30:00Z", []string{
			"2026-10-24T23:00:00Z = 01:00 CEST",
			"2026-10-25T00:00:00Z = 02:00 CEST",
			"2026-10-25T02:00:00Z = 03:00 CET",
			"2026-10-25T03:00:00Z = 04:00 CET",
		}},
		{"New York spring hourly: 02:00 moves onto 03:00, once", "America/New_York", "0 * * * *", "2026-03-08T05:30:00Z", []string{
			"2026-03-08T06:00:00Z = 01:00 EST",
			"2026-03-08T07:00:00Z = 03:00 EDT",
			"2026-03-08T08:00:00Z = 04:00 EDT",
		}},
		{"New York fall hourly: 01:00 once", "America/New_York", "0 * * * *", "2026-11-01T03:30:00Z", []string{
			"2026-11-01T04:00:00Z = 00:00 EDT",
			"2026-11-01T05:00:00Z = 01:00 EDT",
			"2026-11-01T07:00:00Z = 02:00 EST",
			"2026-11-01T08:00:00Z = 03:00 EST",
		}},

		{"Berlin spring */30: 02:00 and 02:30 fall on 03:00 and 03:30", "Europe/Berlin", "*/30 * * * *", "2026-03-29T00:00:00Z", []string{
			"2026-03-29T00:30:00Z = 01:30 CET",
			"2026-03-29T01:00:00Z = 03:00 CEST",
			"2026-03-29T01:30:00Z = 03:30 CEST",
			"2026-03-29T02:00:00Z = 04:00 CEST",
		}},
		{"Berlin fall */30: the repeated hour runs once", "Europe/Berlin", "*/30 * * * *", "2026-10-24T23:00:00Z", []string{
			"2026-10-24T23:30:00Z = 01:30 CEST",
			"2026-10-25T00:00:00Z = 02:00 CEST",
			"2026-10-25T00:30:00Z = 02:30 CEST",
			"2026-10-25T02:00:00Z = 03:00 CET",
			"2026-10-25T02:30:00Z = 03:30 CET",
		}},
		{"New York spring */30: 02:00 and 02:30 fall on 03:00 and 03:30", "America/New_York", "*/30 * * * *", "2026-03-08T06:00:00Z", []string{
			"2026-03-08T06:30:00Z = 01:30 EST",
			"2026-03-08T07:00:00Z = 03:00 EDT",
			"2026-03-08T07:30:00Z = 03:30 EDT",
			"2026-03-08T08:00:00Z = 04:00 EDT",
		}},
		{"New York fall */30: the repeated hour runs once", "America/New_York", "*/30 * * * *", "2026-11-01T04:00:00Z", []string{
			"2026-11-01T04:30:00Z = 00:30 EDT",
			"2026-11-01T05:00:00Z = 01:00 EDT",
			"2026-11-01T05:30:00Z = 01:30 EDT",
			"2026-11-01T07:00:00Z = 02:00 EST",
			"2026-11-01T07:30:00Z = 02:30 EST",
		}},

		{"a moved time that the cron also matches runs once", "Europe/Berlin", "30 2,3 * * *", "2026-03-28T12:00:00Z", []string{
			"2026-03-29T01:30:00Z = 03:30 CEST",
			"2026-03-30T00:30:00Z = 02:30 CEST",
			"2026-03-30T01:30:00Z = 03:30 CEST",
		}},
		{"moved times interleave with the matched ones", "America/New_York", "10,50 2,3 * * *", "2026-03-08T06:00:00Z", []string{
			"2026-03-08T07:10:00Z = 03:10 EDT",
			"2026-03-08T07:50:00Z = 03:50 EDT",
			"2026-03-09T06:10:00Z = 02:10 EDT",
		}},
		{"@daily in a zone", "America/New_York", "@daily", "2026-11-01T00:00:00Z", []string{
			"2026-11-01T04:00:00Z = 00:00 EDT",
			"2026-11-02T05:00:00Z = 00:00 EST",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			loc, err := time.LoadLocation(tc.zone)
			require.NoError(t, err)
			cal := mustCalendar(t, domain.ScheduleSpec{Cron: tc.cron, Timezone: tc.zone})
			after := utc(t, tc.after)
			got := series(cal, after, len(tc.want))
			var rendered []string
			for _, g := range got {
				require.Equal(t, time.UTC, g.Location())
				rendered = append(rendered, g.Format(time.RFC3339)+" = "+g.In(loc).Format("15:04 MST"))
			}
			require.Equal(t, tc.want, rendered)

			// Between agrees with Next, from any point inside the series.
			last := got[len(got)-1]
			between, more := cal.Between(after, last, 100)
			require.False(t, more)
			require.Equal(t, got, between)
			for i := range got[:len(got)-1] {
				require.Equal(t, got[i+1], cal.Next(got[i].Add(time.Second)), "Next after %s", got[i])
			}
		})
	}
}

// TestCalendarDSTSecondPass: asked from inside the second pass of a
// repeated hour, Next skips the rest of it, whose wall times have run.
func TestCalendarDSTSecondPass(t *testing.T) {
	t.Parallel()
	cal := mustCalendar(t, domain.ScheduleSpec{Cron: "*/30 * * * *", Timezone: "America/New_York"})
	// 06:10Z is 01:10 EST, the second 01:10 of 2026-11-01.
	require.Equal(t, utc(t, "2026-11-01T07:00:00Z"), cal.Next(utc(t, "2026-11-01T06:10:00Z")))
	// Inside the skip of a spring-forward, the moved times are still ahead.
	spring := mustCalendar(t, domain.ScheduleSpec{Cron: "30 2 * * *", Timezone: "America/New_York"})
	require.Equal(t, utc(t, "2026-03-08T07:30:00Z"), spring.Next(utc(t, "2026-03-08T07:10:00Z")))
}

// TestCalendarHalfHourDST: Lord Howe springs forward by 30 minutes, so a
// skipped wall time moves past wall times the cron matches after the skip,
// and the times come out in instant order, not in wall-clock order.
// 2026-10-03 15:30Z: 02:00 +10:30 -> 02:30 +11:00.
func TestCalendarHalfHourDST(t *testing.T) {
	t.Parallel()
	loc, err := time.LoadLocation("Australia/Lord_Howe")
	require.NoError(t, err)
	cal := mustCalendar(t, domain.ScheduleSpec{Cron: "20,40 * * * *", Timezone: "Australia/Lord_Howe"})
	var rendered []string
	for _, g := range series(cal, utc(t, "2026-10-03T15:00:00Z"), 5) {
		rendered = append(rendered, g.Format(time.RFC3339)+" = "+g.In(loc).Format("15:04 -0700"))
	}
	require.Equal(t, []string{
		"2026-10-03T15:10:00Z = 01:40 +1030",
		"2026-10-03T15:40:00Z = 02:40 +1100",
		"2026-10-03T15:50:00Z = 02:50 +1100", // 02:20, skipped
		"2026-10-03T16:20:00Z = 03:20 +1100",
		"2026-10-03T16:40:00Z = 03:40 +1100",
	}, rendered)
}

// fuzzZones are zones with unusual transitions: half-hour DST (Lord Howe),
// a skipped day (Apia, 2011-12-30), negative DST (Dublin), midnight
// transitions (Sao Paulo, Havana), two-hour DST (Troll), 45-minute
// offsets (Chatham).
var fuzzZones = []string{
	"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia",
	"Europe/Dublin", "America/Sao_Paulo", "America/Havana", "Antarctica/Troll",
	"Pacific/Chatham", "Asia/Kolkata", "America/Santiago", "Africa/Casablanca", "Asia/Tehran",
}

var fuzzCrons = []string{
	"* * * * *", "*/30 * * * *", "0 * * * *", "30 2 * * *", "30 1 * * *", "0 0 * * *",
	"15,45 0-3 * * *", "10,50 2,3 * * *", "*/7 * * * *", "0 0 29 2 *", "59 23 * * *",
	"0 12 * * 1-5", "20,40 * * * *", "@daily", "@weekly", "@monthly", "5 4 1 * *", "*/20 22-23,0-2 * * *",
}

// FuzzCalendar checks, for a cron, zone and time, that Next is strictly
// after its argument, that Between is strictly increasing with no
// duplicates, and that both agree with an oracle that enumerates every
// minute of a three-day window: a matching wall time fires at its first
// instant, and a matching wall time a transition skips fires as far after
// the transition as it lies after the skip's start.
func FuzzCalendar(f *testing.F) {
	f.Add(uint8(0), uint8(1), int64(1774743000)) // Berlin, 2026-03-29
	f.Add(uint8(1), uint8(2), int64(1793500000)) // New York, 2026-11-01
	f.Add(uint8(0), uint8(4), int64(1325160000)) // Apia, 2011-12-29
	f.Add(uint8(6), uint8(3), int64(1775318400)) // Lord Howe, 2026-04-05
	f.Add(uint8(8), uint8(3), int64(1790950000)) // Lord Howe, 2026-10-04
	f.Add(uint8(12), uint8(3), int64(1790950000))
	f.Add(uint8(7), uint8(5), int64(1540000000)) // Dublin, 2018-10-20
	f.Add(uint8(5), uint8(7), int64(1572700000)) // Havana, 2019-11-02
	f.Add(uint8(2), uint8(6), int64(1541300000)) // Sao Paulo, 2018-11-04
	f.Fuzz(func(t *testing.T, cronIdx, zoneIdx uint8, unix int64) {
		// 1980-2040: every zone offset is whole minutes.
		const lo, span = 315532800, 2208988800 - 315532800
		unix = lo + ((unix%span)-lo%span+2*span)%span
		cronSpec, zone := fuzzCrons[int(cronIdx)%len(fuzzCrons)], fuzzZones[int(zoneIdx)%len(fuzzZones)]
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		cal := mustCalendar(t, domain.ScheduleSpec{Cron: cronSpec, Timezone: zone})
		oracleCal := mustCalendar(t, domain.ScheduleSpec{Cron: cronSpec})

		from := time.Unix(unix, 0).UTC().Truncate(time.Minute)
		upTo := from.Add(48 * time.Hour)
		want := oracle(oracleCal, loc, from, upTo)

		got, more := cal.Between(from, upTo, 1<<20)
		require.False(t, more)
		require.Equal(t, want, got, "%q in %s over (%s, %s]", cronSpec, zone, from, upTo)
		for i := range got {
			require.Equal(t, time.UTC, got[i].Location())
			require.Zero(t, got[i].Nanosecond())
			if i > 0 {
				require.True(t, got[i].After(got[i-1]))
			}
		}
		for _, at := range []time.Time{from.Add(time.Duration(unix%86400) * time.Second), from.Add(17 * time.Hour).Add(123456789)} {
			if next := cal.Next(at); !next.IsZero() {
				require.True(t, next.After(at), "Next(%s) = %s", at, next)
				j := slices.IndexFunc(want, func(w time.Time) bool { return w.After(at) })
				if j >= 0 {
					require.Equal(t, want[j], next, "Next(%s)", at)
				}
			}
		}
	})
}

// oracle returns the instants in (from, upTo] at which the cron, whose UTC
// calendar is utcCal, fires on the wall clock of loc, by walking every
// minute from a day before from to a day after upTo.
func oracle(utcCal *domain.Calendar, loc *time.Location, from, upTo time.Time) []time.Time {
	matches := func(wall time.Time) bool { return utcCal.Next(wall.Add(-time.Second)).Equal(wall) }
	wallOf := func(t time.Time) time.Time {
		l := t.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC)
	}
	seen := map[time.Time]bool{}
	fires := map[time.Time]bool{}
	for m := from.Add(-24 * time.Hour); !m.After(upTo.Add(24 * time.Hour)); m = m.Add(time.Minute) {
		w := wallOf(m)
		if !seen[w] {
			seen[w] = true
			if matches(w) {
				fires[m] = true
			}
		}
		// A transition between m and the next minute skipped the wall
		// times between their wall clocks.
		next := wallOf(m.Add(time.Minute))
		for skipped := w.Add(time.Minute); skipped.Before(next); skipped = skipped.Add(time.Minute) {
			if matches(skipped) && !seen[skipped] {
				fires[m.Add(skipped.Sub(w))] = true
			}
		}
	}
	var out []time.Time
	for at := range fires {
		if at.After(from) && !at.After(upTo) {
			out = append(out, at)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

func ExampleCalendar_Next() {
	cal, _ := domain.ScheduleSpec{Cron: "30 2 * * *", Timezone: "Europe/Berlin"}.Calendar()
	berlin, _ := time.LoadLocation("Europe/Berlin")
	t := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
	for range 2 {
		t = cal.Next(t)
		fmt.Println(t.Format(time.RFC3339), t.In(berlin).Format("15:04 MST"))
	}
	// Output:
	// 2026-03-29T01:30:00Z 03:30 CEST
	// 2026-03-30T00:30:00Z 02:30 CEST
}
