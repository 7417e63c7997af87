package domain

import (
	"errors"
	"fmt"
)

// An approval step's decisions.
const (
	DecisionApproved = "approved"
	DecisionRejected = "rejected"
)

// ReasonRejected is the reason of an approval step that a rejection
// FAILED.
const ReasonRejected = "rejected"

// Errors of CheckApproval.
var (
	// ErrNotWaiting: the action is not an approval step waiting for its
	// decision (kind approval, PAUSED, waiting for an approval, not yet
	// decided).
	ErrNotWaiting = errors.New("not an approval step waiting for a decision")
	// ErrUnknownDecision: a decision that is neither DecisionApproved nor
	// DecisionRejected.
	ErrUnknownDecision = errors.New("unknown approval decision")
)

// ApprovalWait is what the approval rule reads of an action.
type ApprovalWait struct {
	Kind  string
	Phase Phase
	// WaitsForApproval is true while the action waits for an approve or a
	// reject (its waiting_for).
	WaitsForApproval bool
	// Decided is true once a decision was recorded.
	Decided bool
}

// CheckApproval returns nil when decision may be recorded on an action in
// w: an approve or a reject, once, of an approval step that is PAUSED
// waiting for it. Errors: ErrUnknownDecision (wrapped, naming it), else
// ErrNotWaiting, also for a decision already made.
func CheckApproval(w ApprovalWait, decision string) error {
	if decision != DecisionApproved && decision != DecisionRejected {
		return fmt.Errorf("%w %q", ErrUnknownDecision, decision)
	}
	if w.Kind != KindApproval || w.Phase != PhasePaused || !w.WaitsForApproval || w.Decided {
		return ErrNotWaiting
	}
	return nil
}

// ApprovalOutcome returns how an approval step's wait ends once its
// decision (nil for none yet) was recorded: SUCCEEDED when approved, else
// FAILED with reason ReasonRejected; ended is false while undecided.
func ApprovalOutcome(decision *string) (to Phase, reason string, ended bool) {
	switch {
	case decision == nil:
		return "", "", false
	case *decision == DecisionApproved:
		return PhaseSucceeded, "", true
	}
	return PhaseFailed, ReasonRejected, true
}
