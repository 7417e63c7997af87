package domain

import (
	"slices"
	"time"
)

// LostMargin is how much older than a worker's previous heartbeat an
// attempt's last report must be before a heartbeat that omits the attempt
// declares it lost. It absorbs clock skew between api replicas.
const LostMargin = time.Second

// BeatLoss is which attempts placed on a worker one of its heartbeats
// declares lost (WORKER_FAILED) when the beat does not list them among
// those it holds: the attempts in States whose last report is older than
// ReportedBefore. Iris: a heartbeat reconciles the attempts a worker runs
// with those placed on it, in both directions.
type BeatLoss struct {
	// States are the states a lost attempt may be in, BUILDING and
	// RUNNING: an ASSIGNED attempt may still wait in the worker's queue.
	States []TaskState
	// ReportedBefore bounds the attempt's last report.
	ReportedBefore time.Time
}

// LossOnBeat returns the BeatLoss of a heartbeat whose worker's previous
// heartbeat arrived at previous: BUILDING or RUNNING, last reported before
// previous - LostMargin. The executor lists an attempt from before its
// first report until after its final one, and builds each beat after the
// previous beat's reply: an attempt reported before that beat and listed
// no more ended without its final report reaching the control plane.
func LossOnBeat(previous time.Time) BeatLoss {
	return BeatLoss{States: []TaskState{TaskBuilding, TaskRunning}, ReportedBefore: previous.Add(-LostMargin)}
}

// Lost reports whether l declares lost an attempt in state, last reported
// at reportedAt, that the beat lists among those it holds or not (held).
func (l BeatLoss) Lost(state TaskState, reportedAt time.Time, held bool) bool {
	return !held && slices.Contains(l.States, state) && reportedAt.Before(l.ReportedBefore)
}
