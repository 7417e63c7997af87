package domain

import "maps"

// AttemptFacts are what the report rule reads of an attempt and its task,
// as the transaction recording the report holds them.
type AttemptFacts struct {
	// State is the attempt's state; Number its number among its task's
	// attempts (1 for the first).
	State  TaskState
	Number int
	// WorkerID is the worker the attempt is placed on; "" for none.
	WorkerID string
	// TaskState is its task's state; AttemptCount how many attempts the
	// task has made.
	TaskState    TaskState
	AttemptCount int
}

// AttemptReport is a report as the rule reads it: the attempt it is about
// and the state reported.
type AttemptReport struct {
	AttemptID int64
	State     TaskState
}

// ReportVerdict is what becomes of a report (DecideReport).
type ReportVerdict uint8

// Report verdicts. The zero verdict writes nothing.
const (
	// ReportIgnore: the report changes nothing and is no error: the
	// attempt ended already (a late or duplicate report), PENDING was
	// reported (Iris's controller ignores it, so that an ASSIGNED task does
	// not regress), or, from a named worker, the attempt is in the reported
	// state already, or RUNNING and reported BUILDING (a batch resent after
	// a lost answer).
	ReportIgnore ReportVerdict = iota
	// ReportApply: the attempt takes the reported state.
	ReportApply
	// ReportUnknown: there is no such attempt.
	ReportUnknown
	// ReportNotHeld: the attempt is not placed on the reporting worker.
	ReportNotHeld
	// ReportCannotFollow: the reported state cannot follow the attempt's
	// (CanReport).
	ReportCannotFollow
)

// ReportDecision is what one report does. A refused report (Refused) has
// every flag false.
type ReportDecision struct {
	Verdict ReportVerdict
	// Proceed: the executor may run the attempt on; false, it must stop
	// it. True for a report that is not terminal, applied or ignored,
	// about its task's current attempt (IsCurrentAttempt).
	Proceed bool
	// MoveTask: the task takes the reported state with its attempt: an
	// applied report that is not terminal, about the current attempt.
	MoveTask bool
	// Evaluate: the scheduler must now decide the task's fate: an applied
	// terminal report about the current attempt, or about the last
	// attempt of a task an abort KILLED (its end finishes the abort). An
	// applied terminal report that does not ask it needs no evaluation.
	Evaluate bool
}

// Refused reports whether d refuses its report: ReportUnknown,
// ReportNotHeld or ReportCannotFollow.
func (d ReportDecision) Refused() bool { return d.Verdict >= ReportUnknown }

// DecideReport decides a report of state next about an attempt with facts
// f, made by worker ("" when the reporter is not named: it is then
// neither checked to hold the attempt nor taken to resend what it sent
// already). In order: an attempt on another worker is ReportNotHeld; one
// that ended ignores the report; a PENDING report is ignored (Iris: "if the
// worker reports PENDING, the controller ignores it"); a named worker's
// report of the state the attempt is in, or of BUILDING when it runs, is
// ignored (resent); a state that cannot follow is ReportCannotFollow; else
// the report applies. Iris: worker-reported transitions only move an
// attempt forward.
func DecideReport(f AttemptFacts, worker string, next TaskState) ReportDecision {
	if worker != "" && f.WorkerID != worker {
		return ReportDecision{Verdict: ReportNotHeld}
	}
	if f.State.IsTerminal() {
		return ReportDecision{Verdict: ReportIgnore}
	}
	live := IsCurrentAttempt(f.State, f.TaskState, f.Number, f.AttemptCount)
	proceed := live && !next.IsTerminal()
	if next == TaskPending || worker != "" && (f.State == next || f.State == TaskRunning && next == TaskBuilding) {
		return ReportDecision{Verdict: ReportIgnore, Proceed: proceed}
	}
	if !CanReport(f.State, next) {
		return ReportDecision{Verdict: ReportCannotFollow}
	}
	return ReportDecision{Verdict: ReportApply, Proceed: proceed, MoveTask: proceed,
		Evaluate: next.IsTerminal() && (live || f.killedLast())}
}

// killedLast reports whether f is the last attempt of a task an abort
// KILLED. An attempt whose task moved on otherwise (superseded) needs no
// decision when it ends.
func (f AttemptFacts) killedLast() bool {
	return f.TaskState == TaskKilled && f.Number == f.AttemptCount
}

// DecideReports decides a batch of reports by worker (as DecideReport), in
// order, each over the facts the batch's earlier reports leave: an applied
// report moves its attempt to the reported state, and its task too when
// MoveTask. facts holds the batch's attempts by id; a report about an
// attempt missing there is ReportUnknown. It returns one decision per
// report and does not change facts.
func DecideReports(facts map[int64]AttemptFacts, worker string, reports []AttemptReport) []ReportDecision {
	now := maps.Clone(facts)
	out := make([]ReportDecision, len(reports))
	for i, r := range reports {
		f, ok := now[r.AttemptID]
		if !ok {
			out[i] = ReportDecision{Verdict: ReportUnknown}
			continue
		}
		out[i] = DecideReport(f, worker, r.State)
		if out[i].Verdict != ReportApply {
			continue
		}
		f.State = r.State
		if out[i].MoveTask {
			f.TaskState = r.State
		}
		now[r.AttemptID] = f
	}
	return out
}
