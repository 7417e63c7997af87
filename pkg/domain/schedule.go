package domain

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// Overlap policies: what a schedule does with a scheduled time that comes
// due while an earlier run of it has not finished (Temporal's
// ScheduleOverlapPolicy, without TERMINATE_OTHER). DecideFire applies them.
const (
	// OverlapSkip drops the time (the default).
	OverlapSkip = "skip"
	// OverlapBufferOne keeps at most one time waiting and drops the rest.
	OverlapBufferOne = "buffer_one"
	// OverlapBufferAll keeps every time waiting, in order.
	OverlapBufferAll = "buffer_all"
	// OverlapCancelOther cancels the running runs and starts the newest time.
	OverlapCancelOther = "cancel_other"
	// OverlapAllowAll starts every time, however many runs are running.
	OverlapAllowAll = "allow_all"
)

// OverlapPolicies lists the overlap policies a ScheduleSpec may name.
var OverlapPolicies = []string{OverlapSkip, OverlapBufferOne, OverlapBufferAll, OverlapCancelOther, OverlapAllowAll}

const (
	// DefaultCatchupWindow is how late a scheduled time may still start when
	// ScheduleSpec.CatchupWindow is empty: one year (Temporal's default).
	DefaultCatchupWindow = 365 * 24 * time.Hour
	// MinInterval is the shortest ScheduleSpec.Interval: one second.
	MinInterval = time.Second
	// MaxBackfillTimes is the most scheduled times one backfill may start.
	MaxBackfillTimes = 10000
	// MaxScheduleNameLen is the longest schedule name whose run names
	// (ScheduledRunName) fit the 63 characters of a run name: 63 - 17.
	MaxScheduleNameLen = 63 - len("-20060102t150405z")
)

// ErrInvalidSchedule is wrapped by ScheduleSpec.Calendar when the spec does
// not validate; the FieldErrors of Validate("spec") are joined under it.
var ErrInvalidSchedule = errors.New("invalid schedule spec")

// ScheduleSpec is when a schedule fires, as the API carries it. Exactly one
// of Cron and Interval is set; every duration is a Go duration string
// ("90s", "1h30m").
type ScheduleSpec struct {
	// Cron is a 5-field standard cron expression (minute hour day-of-month
	// month day-of-week, robfig/cron's standard parser) or a descriptor:
	// @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually.
	// @every is not a cron here: use Interval.
	Cron string `json:"cron,omitempty"`
	// Interval fires every Interval since the Unix epoch (Temporal's
	// IntervalSpec with phase 0); a whole number of seconds, at least
	// MinInterval.
	Interval string `json:"interval,omitempty"`
	// Timezone is the IANA zone whose wall clock Cron reads; "" is UTC.
	// Interval ignores it.
	Timezone string `json:"timezone,omitempty"`
	// Jitter is the upper bound (exclusive) of the delay JitterFor adds to
	// each scheduled time; default 0, never negative.
	Jitter string `json:"jitter,omitempty"`
	// Overlap is one of OverlapPolicies; default OverlapSkip.
	Overlap string `json:"overlap,omitempty"`
	// CatchupWindow is how late a scheduled time may still start, > 0;
	// default DefaultCatchupWindow.
	CatchupWindow string `json:"catchup_window,omitempty"`
}

// Validate returns the problems of s, each naming its field under prefix
// ("spec.cron"; "cron" when prefix is ""); empty means valid. It reads the
// zone database for Timezone but nothing else.
func (s ScheduleSpec) Validate(prefix string) []FieldError {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		if prefix == "" {
			field = field[1:]
		}
		errs = append(errs, FieldError{Field: prefix + field, Message: fmt.Sprintf(format, a...)})
	}
	switch {
	case s.Cron == "" && s.Interval == "":
		add(".cron", "set exactly one of cron and interval; got neither")
	case s.Cron != "" && s.Interval != "":
		add(".interval", "set exactly one of cron and interval; got cron %q and interval %q", s.Cron, s.Interval)
	case s.Cron != "":
		if _, msg := parseCron(s.Cron); msg != "" {
			add(".cron", "%s", msg)
		}
	default:
		if _, msg := parseInterval(s.Interval); msg != "" {
			add(".interval", "%s", msg)
		}
	}
	if _, msg := loadZone(s.Timezone); msg != "" {
		add(".timezone", "%s", msg)
	}
	if d, err := time.ParseDuration(s.Jitter); s.Jitter != "" && (err != nil || d < 0) {
		add(".jitter", "must be a duration of 0 or more such as \"30s\"; got %q", s.Jitter)
	}
	if s.Overlap != "" && !slices.Contains(OverlapPolicies, s.Overlap) {
		add(".overlap", "unknown overlap policy %q; known: %s", s.Overlap, strings.Join(OverlapPolicies, ", "))
	}
	if d, err := time.ParseDuration(s.CatchupWindow); s.CatchupWindow != "" && (err != nil || d <= 0) {
		add(".catchup_window", "must be a duration greater than 0 such as \"10m\"; got %q", s.CatchupWindow)
	}
	return errs
}

// parseInterval returns the interval v names, or why it cannot be one.
func parseInterval(v string) (time.Duration, string) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, fmt.Sprintf("must be a duration such as \"15m\"; got %q", v)
	case d < MinInterval:
		return 0, fmt.Sprintf("must be at least %s; got %q", MinInterval, v)
	case d%time.Second != 0:
		return 0, fmt.Sprintf("must be a whole number of seconds; got %q", v)
	}
	return d, ""
}

// loadZone returns the zone name names ("" is UTC), or why it cannot.
// "Local" is refused: it means the host's zone, which differs between hosts.
func loadZone(name string) (*time.Location, string) {
	if name == "" {
		return time.UTC, ""
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return nil, fmt.Sprintf("must be an IANA time zone such as \"Europe/Berlin\"; got %q", name)
	}
	return loc, ""
}

// JitterFor returns the delay, in [0, max), to add to scheduled time at of
// the schedule id: a hash of both, so every scheduler that computes it gets
// the same. It is 0 when max <= 0. Temporal derives its jitter the same way
// (a hash of the nominal time) and bounds max by the time until the next
// nominal time; callers that want that pass min(jitter, next-at).
func JitterFor(id string, at time.Time, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	var buf [12]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(at.Unix()))
	binary.BigEndian.PutUint32(buf[8:], uint32(at.Nanosecond()))
	h := sha256.New()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write(buf[:])
	sum := binary.BigEndian.Uint64(h.Sum(nil))
	hi, _ := bits.Mul64(sum, uint64(max))
	return time.Duration(hi)
}

// ScheduledRunName is the name of the run that schedule starts for the
// scheduled time at: "<schedule>-<yyyymmdd>t<hhmmss>z" in UTC, e.g.
// "nightly-20261202t030000z", lower case because run names are [a-z0-9-].
// It fits a run name when ValidScheduleName(schedule) and at's year has
// four digits.
func ScheduledRunName(schedule string, at time.Time) string {
	return schedule + "-" + at.UTC().Format("20060102t150405z")
}

// ValidScheduleName reports whether name is a valid schedule name: a valid
// name (ValidName) of at most MaxScheduleNameLen characters.
func ValidScheduleName(name string) bool {
	return len(name) <= MaxScheduleNameLen && ValidName(name)
}
