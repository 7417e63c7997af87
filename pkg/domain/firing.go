package domain

import (
	"cmp"
	"slices"
	"time"
)

const (
	// MaxFiringTimes is the most automatic scheduled times one firing of a
	// schedule decides; a schedule further behind is decided again at once
	// (Firing.CheckAt is now).
	MaxFiringTimes = 1000
	// MaxBuffered is the most times a schedule keeps buffered; a time that
	// would buffer beyond it is skipped (skipped_overlap). Temporal bounds
	// its buffer the same way; here the bound lets a whole backfill
	// (MaxBackfillTimes) wait under buffer_all.
	MaxBuffered = MaxBackfillTimes
	// maxMissedPerFiring bounds the cron times one firing counts as missed
	// without deciding them; an interval's are counted at once, however many.
	maxMissedPerFiring = 100000
)

// PendingTime is a scheduled time a trigger or a backfill asked a schedule
// to start, with the overlap policy the request named ("": the
// schedule's). A pending time is decided at the schedule's next firing
// whatever its age (the catch-up window is for automatic times) and while
// the schedule is paused: Temporal takes manual actions while paused.
type PendingTime struct {
	At      time.Time `json:"at"`
	Overlap string    `json:"overlap,omitempty"`
}

// AddPending returns pending (sorted by At) with each of times added under
// overlap, sorted by At; a time already pending keeps its entry. It
// returns pending unchanged and false when the result would hold more than
// MaxBackfillTimes times.
func AddPending(pending []PendingTime, times []time.Time, overlap string) ([]PendingTime, bool) {
	out := slices.Clone(pending)
	for _, at := range times {
		at = at.UTC()
		i, found := slices.BinarySearchFunc(out, at, func(p PendingTime, t time.Time) int { return p.At.Compare(t) })
		if !found {
			out = slices.Insert(out, i, PendingTime{At: at, Overlap: overlap})
		}
	}
	if len(out) > MaxBackfillTimes {
		return pending, false
	}
	return out, true
}

// DueAt is when scheduled time t of cal, a schedule named id, is due: t
// plus its JitterFor delay, bounded by the time to cal's next scheduled
// time as Temporal bounds it, so that the due times keep the scheduled
// times' order.
func DueAt(cal *Calendar, id string, t time.Time) time.Time {
	return t.Add(jitterAt(cal, id, t, cal.Next(t)))
}

// jitterAt is DueAt's delay for t, whose next scheduled time is next (zero:
// none).
func jitterAt(cal *Calendar, id string, t, next time.Time) time.Duration {
	bound := cal.Jitter()
	if !next.IsZero() && next.Sub(t) < bound {
		bound = next.Sub(t)
	}
	return JitterFor(id, t, bound)
}

// DueTimes returns the scheduled times of cal in (after, now] that are due
// at now (DueAt not after now), oldest first, at most max of them, and
// whether more were due.
func DueTimes(cal *Calendar, id string, after, now time.Time, max int) ([]time.Time, bool) {
	var out []time.Time
	for t := cal.Next(after); !t.IsZero() && !t.After(now); {
		next := cal.Next(t)
		if t.Add(jitterAt(cal, id, t, next)).After(now) {
			break // DueAt keeps the order: no later time is due either
		}
		if len(out) == max {
			return out, true
		}
		out = append(out, t)
		t = next
	}
	return out, false
}

// ScheduleState is what one firing of a schedule reads.
type ScheduleState struct {
	// ID names the schedule for JitterFor: "project/domain/name".
	ID string
	// Calendar is the schedule's compiled spec.
	Calendar *Calendar
	// Paused stops the automatic times; pending and buffered times still
	// start.
	Paused bool
	// Cursor is the latest automatic time decided: the times after it are
	// still to come.
	Cursor time.Time
	// Pending are the times triggers and backfills asked for, by At.
	Pending []PendingTime
	// Buffered are the times earlier firings buffered, oldest first.
	Buffered []time.Time
	// Running counts the schedule's runs that are not yet terminal.
	Running int
}

// Firing is what one firing of a schedule decides. Every pending time,
// buffered time and automatic time it decided is in Start, in Buffered, or
// counted in Missed or Skipped (a time that two of them name, e.g. a
// trigger at an automatic time, is started once).
type Firing struct {
	// Start are the times to start a run for, oldest first, distinct.
	Start []time.Time
	// CancelRunning says to cancel the runs that were running before this
	// firing (cancel_other).
	CancelRunning bool
	// Cursor is the schedule's cursor afterwards.
	Cursor time.Time
	// Buffered is the schedule's buffer afterwards, oldest first; the
	// pending times are all decided.
	Buffered []time.Time
	// Missed counts the automatic times older than the catch-up window
	// (missed_catchup_window); Skipped the times the overlap policy or a
	// full buffer dropped (skipped_overlap).
	Missed, Skipped int
	// CheckAt is when to fire the schedule next: now when more automatic
	// times are due than one firing decides; else the next automatic time's
	// DueAt (none while paused), or now + recheck while times are buffered
	// if that is sooner. Zero: nothing will come (paused with an empty
	// buffer, or a cron that never fires again).
	CheckAt time.Time
}

// FireSchedule decides one firing of s at now, as Temporal's scheduler
// processes a schedule: the automatic times due (DueTimes), those older
// than the catch-up window counted as missed (SplitCatchup), then, with the
// schedule's overlap policy, the buffered times and the automatic and
// pending times of that policy (DecideFire), then the pending times of
// each other policy, in OverlapPolicies order, each group seeing the runs
// the earlier ones started as running. A buffered time waits for the
// running runs to end; recheck is how soon a firing looks again.
func FireSchedule(s ScheduleState, now time.Time, recheck time.Duration) Firing {
	f := Firing{Cursor: s.Cursor}
	var due []time.Time
	behind := false
	if !s.Paused {
		due, f.Missed, f.Cursor, behind = s.dueTimes(now)
	}
	own := s.Calendar.Overlap()
	groups := map[string][]time.Time{}
	for _, p := range s.Pending {
		o := cmp.Or(p.Overlap, own)
		groups[o] = append(groups[o], p.At.UTC())
	}
	before := s.Running // the runs running before this firing, until cancelled
	var starts, buffered [][]time.Time
	decide := func(st FireState) {
		st.Running = before + len(mergeTimes(starts...))
		d := DecideFire(st)
		if d.CancelRunning && before > 0 {
			f.CancelRunning, before = true, 0
		}
		starts, buffered = append(starts, d.Start), append(buffered, d.Buffered)
		f.Skipped += d.Skipped
	}
	decide(FireState{Overlap: own, Due: mergeTimes(due, groups[own]), Buffered: s.Buffered})
	for _, o := range OverlapPolicies {
		if o != own && len(groups[o]) > 0 {
			decide(FireState{Overlap: o, Due: groups[o]})
		}
	}
	f.Start = mergeTimes(starts...)
	f.Buffered = slices.DeleteFunc(mergeTimes(buffered...), func(t time.Time) bool {
		_, started := slices.BinarySearchFunc(f.Start, t, time.Time.Compare)
		return started
	})
	if over := len(f.Buffered) - MaxBuffered; over > 0 {
		f.Buffered, f.Skipped = f.Buffered[:MaxBuffered], f.Skipped+over
	}
	f.CheckAt = s.checkAt(f, now, recheck, behind)
	return f
}

// dueTimes returns the automatic times of s due at now inside the catch-up
// window, oldest first; how many older ones it missed; the cursor after
// them; and whether more are due than one firing decides.
func (s ScheduleState) dueTimes(now time.Time) (kept []time.Time, missed int, cursor time.Time, behind bool) {
	cal, cursor := s.Calendar, s.Cursor
	if cutoff := now.Add(-cal.CatchupWindow()); cursor.Before(cutoff) {
		n, last, more := cal.countBefore(cursor, cutoff, maxMissedPerFiring)
		if n > 0 {
			missed, cursor = n, last
		}
		if more {
			return nil, missed, cursor, true
		}
	}
	times, more := DueTimes(cal, s.ID, cursor, now, MaxFiringTimes)
	kept, m := SplitCatchup(times, now, cal.CatchupWindow())
	if len(times) > 0 {
		cursor = times[len(times)-1]
	}
	return kept, missed + m, cursor, more
}

// checkAt is Firing.CheckAt for f, decided at now.
func (s ScheduleState) checkAt(f Firing, now time.Time, recheck time.Duration, behind bool) time.Time {
	if behind {
		return now
	}
	var at time.Time
	if !s.Paused {
		if next := s.Calendar.Next(f.Cursor); !next.IsZero() {
			at = DueAt(s.Calendar, s.ID, next)
		}
	}
	if r := now.Add(recheck); len(f.Buffered) > 0 && (at.IsZero() || r.Before(at)) {
		at = r
	}
	return at
}

// countBefore counts the scheduled times of c in (after, before), at most
// max of a cron's (an interval's are counted at once), and returns the
// latest one counted and whether more remained.
func (c *Calendar) countBefore(after, before time.Time, max int) (int, time.Time, bool) {
	if c.wall == nil {
		first := c.nextInterval(after)
		if first.IsZero() || !first.Before(before) {
			return 0, time.Time{}, false
		}
		last := before.Add(-time.Nanosecond).Unix()
		last -= ((last % c.every) + c.every) % c.every // floor to a multiple
		return int((last-first.Unix())/c.every) + 1, time.Unix(last, 0).UTC(), false
	}
	times, more := c.Between(after, before.Add(-time.Nanosecond), max)
	if len(times) == 0 {
		return 0, time.Time{}, more
	}
	return len(times), times[len(times)-1], more
}

// mergeTimes merges sorted lists of times into one sorted list without
// repeats.
func mergeTimes(lists ...[]time.Time) []time.Time {
	var out []time.Time
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.SortFunc(out, time.Time.Compare)
	return slices.CompactFunc(out, time.Time.Equal)
}
