package domain_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

func TestScheduleSpecValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec domain.ScheduleSpec
		// field is the one field named, "" for valid; msg is part of its
		// message.
		field, msg string
	}{
		{name: "5-field cron", spec: domain.ScheduleSpec{Cron: "0 3 * * *"}},
		{name: "cron with names and steps", spec: domain.ScheduleSpec{Cron: "*/15 9-17 * jan-jun mon-fri"}},
		{name: "@hourly", spec: domain.ScheduleSpec{Cron: "@hourly"}},
		{name: "@daily", spec: domain.ScheduleSpec{Cron: "@daily"}},
		{name: "@midnight", spec: domain.ScheduleSpec{Cron: "@midnight"}},
		{name: "@weekly", spec: domain.ScheduleSpec{Cron: "@weekly"}},
		{name: "@monthly", spec: domain.ScheduleSpec{Cron: "@monthly"}},
		{name: "@yearly", spec: domain.ScheduleSpec{Cron: "@yearly"}},
		{name: "Feb 29 fires in leap years", spec: domain.ScheduleSpec{Cron: "0 0 29 2 *"}},
		{name: "interval", spec: domain.ScheduleSpec{Interval: "90s"}},
		{name: "interval of MinInterval", spec: domain.ScheduleSpec{Interval: "1s"}},
		{name: "every field", spec: domain.ScheduleSpec{Cron: "0 3 * * *", Timezone: "Europe/Berlin", Jitter: "30s", Overlap: domain.OverlapBufferAll, CatchupWindow: "10m"}},
		{name: "every overlap policy", spec: domain.ScheduleSpec{Interval: "1h", Overlap: domain.OverlapCancelOther}},
		{name: "zero jitter", spec: domain.ScheduleSpec{Interval: "1h", Jitter: "0s"}},
		{name: "timezone with an interval is ignored but checked", spec: domain.ScheduleSpec{Interval: "1h", Timezone: "America/New_York"}},
		{name: "UTC", spec: domain.ScheduleSpec{Cron: "@daily", Timezone: "UTC"}},

		{name: "neither cron nor interval", spec: domain.ScheduleSpec{}, field: "spec.cron", msg: "got neither"},
		{name: "both cron and interval", spec: domain.ScheduleSpec{Cron: "@daily", Interval: "1h"}, field: "spec.interval", msg: `got cron "@daily" and interval "1h"`},
		{name: "cron that does not parse", spec: domain.ScheduleSpec{Cron: "not a cron"}, field: "spec.cron", msg: `got "not a cron"`},
		{name: "cron with 6 fields", spec: domain.ScheduleSpec{Cron: "0 0 3 * * *"}, field: "spec.cron", msg: `got "0 0 3 * * *"`},
		{name: "cron out of range", spec: domain.ScheduleSpec{Cron: "61 * * * *"}, field: "spec.cron", msg: `got "61 * * * *"`},
		{name: "unknown descriptor", spec: domain.ScheduleSpec{Cron: "@fortnightly"}, field: "spec.cron", msg: `got "@fortnightly"`},
		{name: "@every is an interval", spec: domain.ScheduleSpec{Cron: "@every 1h"}, field: "spec.cron", msg: "set interval instead"},
		{name: "cron naming its zone", spec: domain.ScheduleSpec{Cron: "CRON_TZ=Europe/Berlin 0 3 * * *"}, field: "spec.cron", msg: "set timezone instead"},
		{name: "TZ= without a space", spec: domain.ScheduleSpec{Cron: "TZ=UTC"}, field: "spec.cron", msg: "set timezone instead"},
		{name: "Feb 30 never fires", spec: domain.ScheduleSpec{Cron: "0 0 30 2 *"}, field: "spec.cron", msg: `never fires (no such date in any year); got "0 0 30 2 *"`},
		{name: "Apr 31 never fires", spec: domain.ScheduleSpec{Cron: "0 0 31 4 *"}, field: "spec.cron", msg: "never fires"},
		{name: "interval that does not parse", spec: domain.ScheduleSpec{Interval: "hourly"}, field: "spec.interval", msg: `got "hourly"`},
		{name: "interval under a second", spec: domain.ScheduleSpec{Interval: "500ms"}, field: "spec.interval", msg: `must be at least 1s; got "500ms"`},
		{name: "negative interval", spec: domain.ScheduleSpec{Interval: "-1h"}, field: "spec.interval", msg: "at least 1s"},
		{name: "interval with a fraction of a second", spec: domain.ScheduleSpec{Interval: "1.5s"}, field: "spec.interval", msg: `whole number of seconds; got "1.5s"`},
		{name: "unknown timezone", spec: domain.ScheduleSpec{Cron: "@daily", Timezone: "Mars/Olympus"}, field: "spec.timezone", msg: `got "Mars/Olympus"`},
		{name: "Local is refused", spec: domain.ScheduleSpec{Cron: "@daily", Timezone: "Local"}, field: "spec.timezone", msg: `got "Local"`},
		{name: "timezone path", spec: domain.ScheduleSpec{Cron: "@daily", Timezone: "../etc/passwd"}, field: "spec.timezone", msg: "IANA"},
		{name: "negative jitter", spec: domain.ScheduleSpec{Interval: "1h", Jitter: "-1s"}, field: "spec.jitter", msg: `got "-1s"`},
		{name: "jitter that does not parse", spec: domain.ScheduleSpec{Interval: "1h", Jitter: "a bit"}, field: "spec.jitter", msg: `got "a bit"`},
		{name: "unknown overlap", spec: domain.ScheduleSpec{Interval: "1h", Overlap: "terminate_other"}, field: "spec.overlap", msg: `unknown overlap policy "terminate_other"; known: skip, buffer_one`},
		{name: "zero catchup window", spec: domain.ScheduleSpec{Interval: "1h", CatchupWindow: "0s"}, field: "spec.catchup_window", msg: `got "0s"`},
		{name: "negative catchup window", spec: domain.ScheduleSpec{Interval: "1h", CatchupWindow: "-5m"}, field: "spec.catchup_window", msg: `got "-5m"`},
		{name: "catchup window that does not parse", spec: domain.ScheduleSpec{Interval: "1h", CatchupWindow: "1 day"}, field: "spec.catchup_window", msg: `got "1 day"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := tc.spec.Validate("spec")
			cal, err := tc.spec.Calendar()
			if tc.field == "" {
				require.Empty(t, errs)
				require.NoError(t, err)
				require.NotNil(t, cal)
				return
			}
			require.Len(t, errs, 1, "%v", errs)
			require.Equal(t, tc.field, errs[0].Field)
			require.Contains(t, errs[0].Message, tc.msg)
			require.ErrorIs(t, err, domain.ErrInvalidSchedule)
			var fe domain.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, errs[0], fe)
			require.Nil(t, cal)
		})
	}
}

func TestScheduleSpecValidateReportsEveryField(t *testing.T) {
	t.Parallel()
	errs := domain.ScheduleSpec{
		Cron: "0 0 30 2 *", Timezone: "Nowhere", Jitter: "-1s", Overlap: "sometimes", CatchupWindow: "0s",
	}.Validate("schedule.spec")
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	require.Equal(t, []string{
		"schedule.spec.cron", "schedule.spec.timezone", "schedule.spec.jitter",
		"schedule.spec.overlap", "schedule.spec.catchup_window",
	}, fields)
}

func TestCalendarPolicies(t *testing.T) {
	t.Parallel()
	def := mustCalendar(t, domain.ScheduleSpec{Interval: "1h"})
	require.Equal(t, domain.OverlapSkip, def.Overlap(), "Temporal's default overlap policy is skip")
	require.Equal(t, 365*24*time.Hour, def.CatchupWindow(), "Temporal's default catch-up window is one year")
	require.Zero(t, def.Jitter())

	set := mustCalendar(t, domain.ScheduleSpec{Interval: "1h", Overlap: domain.OverlapBufferOne, CatchupWindow: "10m", Jitter: "45s"})
	require.Equal(t, domain.OverlapBufferOne, set.Overlap())
	require.Equal(t, 10*time.Minute, set.CatchupWindow())
	require.Equal(t, 45*time.Second, set.Jitter())
}

func TestJitterFor(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)

	for _, max := range []time.Duration{0, -time.Second} {
		require.Zero(t, domain.JitterFor("nightly", at, max), "max %v", max)
	}
	require.Zero(t, domain.JitterFor("nightly", at, 1), "the only delay in [0, 1ns) is 0")

	d := domain.JitterFor("nightly", at, time.Minute)
	require.Equal(t, d, domain.JitterFor("nightly", at, time.Minute), "deterministic")
	require.Equal(t, d, domain.JitterFor("nightly", at.In(berlin), time.Minute), "the instant counts, not its zone")

	// Over many times and two ids the delays stay in [0, max), differ by
	// id and by time, and spread over the range.
	const max = time.Hour
	var quarters [4]int
	sameAcrossIDs := 0
	for i := range 1000 {
		ti := at.Add(time.Duration(i) * time.Minute)
		a, b := domain.JitterFor("nightly", ti, max), domain.JitterFor("hourly", ti, max)
		for _, j := range []time.Duration{a, b} {
			require.GreaterOrEqual(t, j, time.Duration(0))
			require.Less(t, j, max)
			quarters[j/(max/4)]++
		}
		if a == b {
			sameAcrossIDs++
		}
	}
	require.Less(t, sameAcrossIDs, 5)
	for q, n := range quarters {
		require.InDelta(t, 500, n, 120, "quarter %d of [0, max) holds %d of 2000 delays", q, n)
	}
}

func TestScheduledRunName(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	tests := []struct {
		schedule string
		at       time.Time
		want     string
	}{
		{"nightly", time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC), "nightly-20261202t030000z"},
		{"a", time.Date(2026, 1, 2, 3, 4, 5, 999, time.UTC), "a-20260102t030405z"},
		// The name is in UTC whatever the zone of at.
		{"nightly", time.Date(2026, 12, 2, 4, 0, 0, 0, berlin), "nightly-20261202t030000z"},
		{"nightly", time.Date(2026, 7, 1, 0, 30, 0, 0, berlin), "nightly-20260630t223000z"},
	}
	for _, tc := range tests {
		got := domain.ScheduledRunName(tc.schedule, tc.at)
		require.Equal(t, tc.want, got)
		require.True(t, domain.ValidName(got), "%q is a run name", got)
	}

	longest := strings.Repeat("a", domain.MaxScheduleNameLen)
	name := domain.ScheduledRunName(longest, time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC))
	require.Len(t, name, 63)
	require.True(t, domain.ValidName(name))
}

func TestValidScheduleName(t *testing.T) {
	t.Parallel()
	require.Equal(t, 46, domain.MaxScheduleNameLen)
	for _, ok := range []string{"nightly", "a", "etl-2", "0", strings.Repeat("a", 46)} {
		require.True(t, domain.ValidScheduleName(ok), "%q", ok)
	}
	for _, bad := range []string{"", "Nightly", "-nightly", "nightly-", "night_ly", "nightly.job", strings.Repeat("a", 47), strings.Repeat("a", 63)} {
		require.False(t, domain.ValidScheduleName(bad), "%q", bad)
	}
}

// FuzzScheduleSpecValidate: Validate never panics on any input, and
// Calendar compiles exactly the specs Validate accepts.
func FuzzScheduleSpecValidate(f *testing.F) {
	f.Add("0 3 * * *", "", "Europe/Berlin", "30s", "skip", "10m")
	f.Add("", "90s", "", "", "", "")
	f.Add("TZ=UTC", "", "", "", "", "")
	f.Add("CRON_TZ=Europe/Berlin", "", "", "", "", "")
	f.Add("@every 5m", "", "", "", "", "")
	f.Add("0 0 30 2 *", "", "Local", "-1s", "never", "0s")
	f.Add("1-60/0 * * * *", "", "", "", "", "")
	f.Add("*/0 * * * *", "", "", "", "", "")
	f.Add("5-1 * * * *", "", "", "", "", "")
	f.Add("? ? ? ? ?", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, cron, interval, tz, jitter, overlap, catchup string) {
		spec := domain.ScheduleSpec{Cron: cron, Interval: interval, Timezone: tz, Jitter: jitter, Overlap: overlap, CatchupWindow: catchup}
		errs := spec.Validate("spec")
		cal, err := spec.Calendar()
		if len(errs) > 0 {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		if next := cal.Next(from); !next.IsZero() {
			require.True(t, next.After(from))
		}
	})
}

func mustCalendar(t testing.TB, spec domain.ScheduleSpec) *domain.Calendar {
	t.Helper()
	cal, err := spec.Calendar()
	require.NoError(t, err)
	return cal
}
