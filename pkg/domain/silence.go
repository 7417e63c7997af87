package domain

import "time"

// Fenced liveness: who a liveness pass may declare dead. A worker is
// silent when no heartbeat of its was recorded for a whole grace. Silence
// counts only from a moment when the scheduler and the heartbeat path
// (executor → api → Postgres) were both working, so an outage of the
// control plane — the api, Postgres, or the scheduler itself — never looks
// like the death of every worker.
//
// The contract, every time on Postgres's clock (now() of the pass's
// transaction; heartbeats are stamped with now() of theirs):
//
//   - A worker is silent at now when max(last heartbeat, grace origin) <
//     now - grace.
//   - The grace origin moves to now (every worker gets a fresh grace) on
//     the first pass ever, on a pass that follows a failed pass of the same
//     replica (a Postgres round trip failed), on a pass more than outage
//     after the previous pass (whichever replica led it, or the clock
//     stepped back), and on a pass that finds the heartbeat path's latest
//     stamp older than outage (no api replica recorded that it served
//     heartbeats). Otherwise it stays where it was.
//   - A pass that finds more than half of the alive workers silent declares
//     none dead: it defers them one more grace ("suspected control-plane
//     outage"). A pass at least a grace after the deferral declares dead
//     those still silent then; until then no worker is declared dead. A
//     pass that finds none silent drops the deferral.
//
// For this to hold, the heartbeat path is stamped more often than outage,
// and the liveness pass runs more often than outage; an outage of the path
// shorter than outage goes unnoticed, so outage plus the heartbeat
// interval must stay under the grace. The scheduler's defaults: outage is
// half the grace, the pass and the stamps every min(grace/4, 1s).

// LivenessWatch is what a liveness pass reads before it judges, all on
// Postgres's clock. A zero time is "never".
type LivenessWatch struct {
	// Now is the pass's now().
	Now time.Time
	// CheckedAt is when the previous pass ran.
	CheckedAt time.Time
	// Origin is the grace origin the previous pass left.
	Origin time.Time
	// DeferredAt is when a pass deferred a mass death still unconfirmed.
	DeferredAt time.Time
	// ServedAt is the heartbeat path's latest stamp: when an api replica
	// last recorded that it served heartbeats.
	ServedAt time.Time
}

// GraceRestart is why a pass moved the grace origin to its now; "" when
// it did not.
type GraceRestart string

// The reasons of a grace restart, in the order GraceOrigin tries them.
const (
	RestartFirstPass     GraceRestart = "first_pass"
	RestartRoundTrip     GraceRestart = "round_trip_failed"
	RestartSchedulerGap  GraceRestart = "scheduler_gap"
	RestartHeartbeatPath GraceRestart = "heartbeat_path_down"
)

// GraceOrigin returns the grace origin of a pass that read w, and why it
// moved, if it did. failed is true when the previous pass of this
// replica failed; outage is the longest gap between passes, or since the
// heartbeat path's stamp, that is not an outage.
func GraceOrigin(w LivenessWatch, failed bool, outage time.Duration) (time.Time, GraceRestart) {
	sinceCheck := w.Now.Sub(w.CheckedAt)
	switch {
	case w.CheckedAt.IsZero() || w.Origin.IsZero():
		return w.Now, RestartFirstPass
	case failed:
		return w.Now, RestartRoundTrip
	case sinceCheck > outage || sinceCheck < 0:
		return w.Now, RestartSchedulerGap
	case w.ServedAt.IsZero() || w.Now.Sub(w.ServedAt) > outage:
		return w.Now, RestartHeartbeatPath
	}
	return w.Origin, ""
}

// SilenceVerdict is what a pass does with the workers it found silent.
type SilenceVerdict struct {
	// Declare is true when the silent workers are declared dead now.
	Declare bool
	// Suspected is true when this pass deferred a mass death: more than
	// half of the alive workers silent at once.
	Suspected bool
	// DeferredAt is the unconfirmed deferral after this pass; zero: none.
	DeferredAt time.Time
}

// JudgeSilence decides a pass at now that found silent of alive workers
// silent, with deferredAt the deferral pending before it (zero: none)
// and grace the workers' grace: see the contract above.
func JudgeSilence(alive, silent int, deferredAt, now time.Time, grace time.Duration) SilenceVerdict {
	switch {
	case silent == 0:
		return SilenceVerdict{}
	case !deferredAt.IsZero() && now.Sub(deferredAt) < grace:
		return SilenceVerdict{DeferredAt: deferredAt}
	case !deferredAt.IsZero():
		return SilenceVerdict{Declare: true}
	case 2*silent > alive:
		return SilenceVerdict{Suspected: true, DeferredAt: now}
	}
	return SilenceVerdict{Declare: true}
}
