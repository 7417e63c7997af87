package domain

import "time"

// FireState is what one firing decision of a schedule reads.
type FireState struct {
	// Overlap is the policy for these times, one of OverlapPolicies; ""
	// or an unknown name is OverlapSkip.
	Overlap string
	// Due are the scheduled times now due, oldest first, already inside
	// the catch-up window (SplitCatchup).
	Due []time.Time
	// Running counts the schedule's runs that are not yet terminal.
	Running int
	// Buffered are the times buffered by earlier decisions, oldest first.
	Buffered []time.Time
}

// FireDecision is what to do after one firing decision. Every time of
// FireState.Buffered and FireState.Due ends in exactly one of Start,
// Buffered and Skipped.
type FireDecision struct {
	// Start are the times to start a run for, in order.
	Start []time.Time
	// Buffered is the schedule's buffer afterwards, oldest first.
	Buffered []time.Time
	// Skipped counts the times the overlap policy dropped
	// (skipped_overlap).
	Skipped int
	// CancelRunning says to cancel the schedule's running runs
	// (cancel_other).
	CancelRunning bool
}

// DecideFire applies the overlap policy to the buffered times and then the
// due times, in that order, as Temporal's scheduler processes its buffer: a
// time is started when no run is running, and a run this decision starts
// counts as running for the later times. A time that overlaps is
//   - skip: dropped (Skipped);
//   - buffer_one: buffered if the buffer is empty, else dropped;
//   - buffer_all: buffered;
//   - allow_all: started anyway, so every time starts;
//   - cancel_other: the newest time starts and every older one is dropped,
//     with CancelRunning when Running > 0. Temporal keeps that start
//     buffered until the cancelled runs end; here the caller cancels and
//     then starts.
//
// With nothing due and no run running, the oldest buffered time starts:
// that is how a buffer drains after a run ends.
func DecideFire(s FireState) FireDecision {
	pending := make([]time.Time, 0, len(s.Buffered)+len(s.Due))
	pending = append(append(pending, s.Buffered...), s.Due...)
	var d FireDecision
	switch s.Overlap {
	case OverlapAllowAll:
		if len(pending) > 0 {
			d.Start = pending
		}
		return d
	case OverlapCancelOther:
		if len(pending) > 0 {
			d.Start = pending[len(pending)-1:]
			d.Skipped = len(pending) - 1
			d.CancelRunning = s.Running > 0
		}
		return d
	}
	running := s.Running > 0
	for _, t := range pending {
		switch {
		case !running:
			d.Start = append(d.Start, t)
			running = true
		case s.Overlap == OverlapBufferAll, s.Overlap == OverlapBufferOne && len(d.Buffered) == 0:
			d.Buffered = append(d.Buffered, t)
		default:
			d.Skipped++
		}
	}
	return d
}

// SplitCatchup splits the due times (oldest first) at now - window: those
// before it are missed (counted as missed_catchup_window), the rest are
// kept in order. A window <= 0 is DefaultCatchupWindow. Temporal drops a
// time the same way, by how long after its nominal time it would start.
func SplitCatchup(due []time.Time, now time.Time, window time.Duration) (kept []time.Time, missed int) {
	if window <= 0 {
		window = DefaultCatchupWindow
	}
	cutoff := now.Add(-window)
	for _, t := range due {
		if t.Before(cutoff) {
			missed++
			continue
		}
		kept = append(kept, t)
	}
	return kept, missed
}
