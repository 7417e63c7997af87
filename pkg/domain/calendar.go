package domain

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// cronParser reads 5-field standard cron expressions and descriptors, as
// robfig/cron's ParseStandard does.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronProbe is where Validate asks whether a cron ever fires: the five years
// robfig/cron searches from here hold two leap days.
var cronProbe = time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC)

// Calendar is a compiled ScheduleSpec: its nominal scheduled times and its
// policies, parsed. A Calendar is immutable and safe for concurrent use.
type Calendar struct {
	// wall is the cron evaluated on wall-clock time read as UTC; nil for an
	// interval.
	wall *cron.SpecSchedule
	// loc is the zone whose wall clock wall reads.
	loc *time.Location
	// every is the interval, in whole seconds; 0 for a cron.
	every int64

	jitter, catchup time.Duration
	overlap         string
}

// Calendar compiles s. It returns an error wrapping ErrInvalidSchedule, and
// joining the FieldErrors of Validate("spec"), when s is invalid.
func (s ScheduleSpec) Calendar() (*Calendar, error) {
	if errs := s.Validate("spec"); len(errs) > 0 {
		joined := make([]error, len(errs))
		for i, e := range errs {
			joined[i] = e
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchedule, errors.Join(joined...))
	}
	c := &Calendar{overlap: cmp.Or(s.Overlap, OverlapSkip), catchup: DefaultCatchupWindow}
	c.loc, _ = loadZone(s.Timezone)
	if s.Cron != "" {
		c.wall, _ = parseCron(s.Cron)
	} else {
		d, _ := parseInterval(s.Interval)
		c.every = int64(d / time.Second)
	}
	if s.Jitter != "" {
		c.jitter, _ = time.ParseDuration(s.Jitter)
	}
	if s.CatchupWindow != "" {
		c.catchup, _ = time.ParseDuration(s.CatchupWindow)
	}
	return c, nil
}

// Jitter is the spec's jitter bound, 0 when it has none.
func (c *Calendar) Jitter() time.Duration { return c.jitter }

// Overlap is the spec's overlap policy, OverlapSkip when it names none.
func (c *Calendar) Overlap() string { return c.overlap }

// CatchupWindow is the spec's catch-up window, DefaultCatchupWindow when it
// names none.
func (c *Calendar) CatchupWindow() time.Duration { return c.catchup }

// Next returns the first scheduled time strictly after t, in UTC and whole
// seconds. For a cron it is zero when none falls within five years
// (robfig/cron's horizon); an interval always has a next time unless it
// lies beyond the int64 seconds of time.Time.
//
// An interval fires at every multiple of it since the Unix epoch
// (Temporal's phase 0). A cron fires when the wall clock of its zone reads a
// time it matches, once per wall-clock time, whatever the zone's transitions
// do: a wall time that a spring-forward skips fires once, as many minutes
// after the transition as it lies after the skipped wall time (02:30 becomes
// 03:30 when 02:00 jumps to 03:00); a wall time that a fall-back repeats
// fires once, at its first occurrence. A skipped time that so lands on a
// time the cron also matches fires once.
func (c *Calendar) Next(t time.Time) time.Time {
	if c.wall == nil {
		return c.nextInterval(t)
	}
	return c.nextCron(t)
}

// Between returns the scheduled times in (after, upTo], oldest first, at
// most max of them, and whether more scheduled times of (after, upTo]
// remained. max <= 0 returns none, and whether any exists.
func (c *Calendar) Between(after, upTo time.Time, max int) ([]time.Time, bool) {
	var out []time.Time
	for t := c.Next(after); !t.IsZero() && !t.After(upTo); t = c.Next(t) {
		if len(out) >= max {
			return out, true
		}
		out = append(out, t)
	}
	return out, false
}

// BackfillTimes returns the scheduled times of cal in [start, end], oldest
// first, for a backfill of that range. End before start is a FieldError on
// "end", and so is a range holding more than MaxBackfillTimes times.
func BackfillTimes(cal *Calendar, start, end time.Time) ([]time.Time, []FieldError) {
	if end.Before(start) {
		return nil, []FieldError{{Field: "end", Message: fmt.Sprintf(
			"must not be before start %s; got %s", start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))}}
	}
	times, more := cal.Between(start.Add(-time.Nanosecond), end, MaxBackfillTimes)
	if more {
		return nil, []FieldError{{Field: "end", Message: fmt.Sprintf(
			"the range from start to %s holds more than %d scheduled times; choose an earlier end",
			end.UTC().Format(time.RFC3339), MaxBackfillTimes)}}
	}
	return times, nil
}

// nextInterval returns the smallest multiple of c.every seconds after t.
func (c *Calendar) nextInterval(t time.Time) time.Time {
	ts := t.Unix() // floor: t is in [ts, ts+1s)
	k := ts / c.every
	if ts%c.every < 0 {
		k-- // floor division for times before the epoch
	}
	k++
	if k > math.MaxInt64/c.every {
		return time.Time{}
	}
	return time.Unix(k*c.every, 0).UTC()
}

// parseCron returns the cron v names with its times read as UTC, or why it
// cannot: v does not parse, is @every or carries its own zone, or never
// fires.
func parseCron(v string) (*cron.SpecSchedule, string) {
	if strings.HasPrefix(v, "TZ=") || strings.HasPrefix(v, "CRON_TZ=") {
		return nil, fmt.Sprintf("must not name a zone (set timezone instead); got %q", v)
	}
	if strings.HasPrefix(v, "@every") {
		return nil, fmt.Sprintf("@every is not a cron here (set interval instead); got %q", v)
	}
	s, err := cronParser.Parse(v)
	if err != nil {
		return nil, fmt.Sprintf("must be a 5-field cron expression such as \"0 3 * * *\" or a descriptor such as \"@daily\" (%v); got %q", err, v)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Sprintf("must be a 5-field cron expression or a descriptor; got %q", v)
	}
	utc := *spec
	utc.Location = time.UTC
	if utc.Next(cronProbe).IsZero() {
		return nil, fmt.Sprintf("never fires (no such date in any year); got %q", v)
	}
	return &utc, ""
}
