package domain

// Phase is the phase of an action or a run (a run's phase is its root
// action's). Values match the API enum.
type Phase string

// Phases. Job-level names follow Iris's derivation; PAUSED and SKIPPED are
// workflow-level (KubeVela suspend, a false `if`).
const (
	PhaseQueued              Phase = "QUEUED"
	PhaseWaitingForResources Phase = "WAITING_FOR_RESOURCES"
	// PhaseWaitingForCache: a serializable cached step whose key another
	// action has reserved waits for its outcome (Flyte's
	// PhaseWaitingForCache).
	PhaseWaitingForCache Phase = "WAITING_FOR_CACHE"
	PhaseRunning         Phase = "RUNNING"
	// PhaseWaiting: a task step whose target answered that it is not ready
	// (an http wait code, a shell wait exit code) waits to ask again after
	// KubeVela's waiting backoff, and nothing of it runs meanwhile
	// (KubeVela: an unhealthy step "will be marked as wait but not failed
	// and it will wait for healthy").
	PhaseWaiting       Phase = "WAITING"
	PhaseSucceeded     Phase = "SUCCEEDED"
	PhaseFailed        Phase = "FAILED"
	PhaseAborted       Phase = "ABORTED"
	PhaseTimedOut      Phase = "TIMED_OUT"
	PhaseUnschedulable Phase = "UNSCHEDULABLE"
	PhaseWorkerFailed  Phase = "WORKER_FAILED"
	PhasePaused        Phase = "PAUSED"
	PhaseSkipped       Phase = "SKIPPED"
)

// IsTerminal reports whether an action in phase p will never change again.
func (p Phase) IsTerminal() bool {
	switch p {
	case PhaseSucceeded, PhaseFailed, PhaseAborted, PhaseTimedOut, PhaseUnschedulable, PhaseWorkerFailed, PhaseSkipped:
		return true
	}
	return false
}

// IsSuccess reports whether p lets dependents run: SUCCEEDED or SKIPPED.
func (p Phase) IsSuccess() bool { return p == PhaseSucceeded || p == PhaseSkipped }

// rank orders phases for the forward-only rule.
func (p Phase) rank() int {
	switch p {
	case PhaseQueued, PhaseWaitingForResources, PhaseWaitingForCache:
		return 0
	case PhaseRunning, PhasePaused, PhaseWaiting:
		return 1
	}
	if p.IsTerminal() {
		return 2
	}
	return -1
}

// CanMovePhase reports whether an action may move from phase from to phase to.
// Phases only move forward (QUEUED, WAITING_FOR_RESOURCES and
// WAITING_FOR_CACHE, then RUNNING, PAUSED or WAITING, then a terminal
// phase), except that PAUSED -> RUNNING is a resume (Flyte's
// UpdateActionPhase guard) and RUNNING and WAITING alternate while a step
// waits for its target; a terminal phase never changes.
func CanMovePhase(from, to Phase) bool {
	if from == to {
		return false
	}
	if from.IsTerminal() || to.rank() < 0 || from.rank() < 0 {
		return false
	}
	// Same rank: QUEUED, WAITING_FOR_RESOURCES and WAITING_FOR_CACHE; RUNNING,
	// PAUSED and WAITING.
	return to.rank() >= from.rank()
}

// TerminalPhases lists every terminal phase, for queries.
func TerminalPhases() []string {
	return []string{string(PhaseSucceeded), string(PhaseFailed), string(PhaseAborted), string(PhaseTimedOut),
		string(PhaseUnschedulable), string(PhaseWorkerFailed), string(PhaseSkipped)}
}
