package domain

import (
	"errors"
	"fmt"
)

// Causes: why an attempt ended, or why a process must stop. The executor
// reports an attempt it stopped with the cause it was given.
const (
	// CauseUser: the user's command failed (a non-zero exit).
	CauseUser = "user"
	// CauseSystem: the plugin or platform failed (Flyte's system failure).
	CauseSystem = "system"
	// CausePermanent: the spec can never run (an unknown plugin, invalid
	// fields, an http 4xx): the task fails at once, without retry.
	CausePermanent = "permanent"
	// CauseAborted: a user aborted, or a job failed and killed its survivors.
	CauseAborted = "aborted"
	// CauseTimeout: a timeout expired; an action aborted so ends TIMED_OUT.
	CauseTimeout = "timeout"
	// CausePreempted: the scheduler preempted the attempt.
	CausePreempted = "preempted"
	// CauseWorkerLost: the attempt's worker died, deregistered or lost it.
	CauseWorkerLost = "worker_lost"
	// CauseWaiting: the work answered that its target is not ready yet (an
	// http status in the step's wait_codes, a shell exit with its
	// wait_exit_code): the task waits and asks again after KubeVela's
	// waiting backoff, charged to no budget (DecideWait).
	CauseWaiting = "waiting"
)

// CodePluginUnavailable is the code of an attempt whose executor does not
// run the step's plugin (a container step on an executor without a
// runtime): the platform placed it where it cannot run.
const CodePluginUnavailable = "PluginUnavailable"

// MaxCodeBytes bounds an attempt's error code.
const MaxCodeBytes = 64

// ValidCode reports whether code is a stable error code: an ASCII letter,
// then up to MaxCodeBytes-1 letters and digits, e.g.
// "MaxSystemFailuresExceeded" or "InvalidPluginSpec".
func ValidCode(code string) bool {
	if code == "" || len(code) > MaxCodeBytes {
		return false
	}
	for i, r := range code {
		letter := r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z'
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// ErrBadCause: the cause is not one the operation accepts.
var ErrBadCause = errors.New("invalid abort cause")

// AbortPhase returns the phase an action aborted with cause ends in, and the
// cause to record: TIMED_OUT for CauseTimeout, ABORTED for "" and
// CauseAborted. Errors: ErrBadCause.
func AbortPhase(cause string) (Phase, string, error) {
	switch cause {
	case "", CauseAborted:
		return PhaseAborted, CauseAborted, nil
	case CauseTimeout:
		return PhaseTimedOut, CauseTimeout, nil
	}
	return "", "", fmt.Errorf("%w: %q (want %q or %q)", ErrBadCause, cause, CauseAborted, CauseTimeout)
}

// KillCauses are the causes an attempt kill may carry.
var KillCauses = []string{CausePreempted, CauseTimeout, CauseWorkerLost, CauseAborted}

// GoneState is the final state of a live attempt whose kill with cause found
// it already gone: PREEMPTED for a preemption, WORKER_FAILED for a lost
// worker, else KILLED.
func GoneState(cause string) TaskState {
	switch cause {
	case CausePreempted:
		return TaskPreempted
	case CauseWorkerLost:
		return TaskWorkerFailed
	}
	return TaskKilled
}

// IsPlatformFailure reports whether an attempt that ended in state with cause
// and code counts against its worker (ARC's failures): WORKER_FAILED, or
// FAILED with cause system, except CodePluginUnavailable: a worker that
// lacks a plugin is not failing, the attempt was placed where it cannot run.
func IsPlatformFailure(state TaskState, cause, code string) bool {
	return state == TaskWorkerFailed || state == TaskFailed && cause == CauseSystem && code != CodePluginUnavailable
}

// CascadesGang reports whether a coscheduled task whose attempt ended in
// state, with result, exhausts its live siblings to WORKER_FAILED (Iris's
// _cascade_coscheduled_failure): a terminal failure does, except PREEMPTED —
// Iris's preempt_task does not cascade siblings directly; a preempted gang
// ends only through the job's finalization.
func CascadesGang(state TaskState, result RetryResult) bool {
	return result == ExceededRetryLimit && state != TaskPreempted
}
