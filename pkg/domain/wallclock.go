package domain

import "time"

// A cron is evaluated on wall-clock time: robfig/cron walks "floating"
// times, the wall clock of the zone written as if it were UTC, where no day
// skips or repeats an hour, and each matching wall time becomes one instant
// through instantOf. (robfig/cron run in the zone itself never fires a wall
// time a spring-forward skips, and fires twice at one a fall-back repeats.)
//
// nextCron relies on two properties of instantOf: the instants of wall
// times no transition skipped increase with the wall time and never fall
// in the second pass of a repeated hour; and the instants of the wall times
// one spring-forward skipped increase with the wall time and lie within
// the skip's length after it.

// nextCron returns the earliest instantOf(w) after t over the wall times w
// the cron matches. It asks robfig/cron for a bounded number of wall times:
// a skip's wall times move forward in order, so only the first of them can
// be the earliest, and the rest of the skip is jumped over.
func (c *Calendar) nextCron(t time.Time) time.Time {
	t = t.In(c.loc)
	from := floating(t)
	var best time.Time
	consider := func(at time.Time) {
		if at.After(t) && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	if tr, change := lastTransition(t); change > 0 && t.Sub(tr) < change {
		// Less than a skip's length after a spring-forward, the skipped
		// wall times later than from - change have moved past t.
		if w := c.wall.Next(from.Add(-change)); !w.IsZero() {
			if at, moved := instantOf(w, c.loc); moved {
				consider(at)
			}
		}
	} else if change < 0 && t.Sub(tr) < -change {
		// In the second pass of a repeated hour, its wall times have fired
		// in the first: resume after the last wall time of the first pass.
		from = floating(tr.Add(-time.Second).In(c.loc))
	}
	for w := c.wall.Next(from); !w.IsZero(); {
		at, moved := instantOf(w, c.loc)
		consider(at)
		switch {
		case moved:
			// The skip's later wall times move past at: resume at its end.
			tr, _ := lastTransition(at.In(c.loc))
			w = c.wall.Next(laterOf(w, floating(tr.In(c.loc)).Add(-time.Second)))
		case at.After(t):
			return best.UTC()
		default:
			w = c.wall.Next(w)
		}
	}
	return best.UTC()
}

// lastTransition returns when the zone period of t began and by how much
// the offset changed then: > 0 for a spring-forward, < 0 for a fall-back,
// 0 when nothing began a period t's zone reports.
func lastTransition(t time.Time) (time.Time, time.Duration) {
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return start, 0
	}
	_, after := t.Zone()
	_, before := start.Add(-time.Second).Zone()
	return start, time.Duration(after-before) * time.Second
}

// instantOf returns the instant at which the floating wall time w of loc
// fires, and whether a transition skipped w: then the instant is w read in
// the offset before the transition, which lies as far after the transition
// as w lies after the skipped wall time. A repeated w fires at its first
// occurrence. time.Date alone does neither reliably: which of two
// occurrences, and which side of a skip, it picks depends on the sign of the
// zone's offset.
func instantOf(w time.Time, loc *time.Location) (time.Time, bool) {
	t := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, loc)
	start, _ := t.ZoneBounds()
	_, off := t.Zone()
	before := off
	if !start.IsZero() {
		_, before = start.Add(-time.Second).Zone()
	}
	switch wall := floating(t); {
	case wall.Equal(w):
		// A fall-back repeats w; prefer the occurrence before the transition.
		first := w.Add(-time.Duration(before) * time.Second)
		if before > off && first.Before(start) && floating(first.In(loc)).Equal(w) {
			return first, false
		}
		return t, false
	case wall.After(w):
		// time.Date moved w past the skip: read w in the earlier offset.
		return w.Add(-time.Duration(before) * time.Second), true
	default:
		// time.Date read w in the offset before the skip, landing before it.
		return w.Add(-time.Duration(off) * time.Second), true
	}
}

// floating returns t's wall clock in t's location as a UTC time, truncated
// to the second.
func floating(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
