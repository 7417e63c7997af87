package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Report is a fact an executor reports about an attempt it holds.
type Report struct {
	// State is BUILDING, RUNNING, SUCCEEDED, FAILED or KILLED.
	State    domain.TaskState
	ExitCode *int
	Error    string
	// Cause: user, system, aborted, timeout, worker_lost or preempted.
	Cause     string
	Pid       *int
	Stdout    string
	Stderr    string
	Truncated bool
	// Outputs are a SUCCEEDED attempt's output values, name → value, stored
	// on the attempt; ignored with any other state.
	Outputs map[string]string
	// Code is a stable error code (e.g. InvalidPluginSpec), stored with a
	// terminal state.
	Code string
	// Cleanup is a stopped attempt's plugin Abort and Finalize as they ran,
	// each recorded as a run event (cleanupEvents) with a terminal state.
	Cleanup []CleanupStep
	// PendingReason, with BUILDING, is why the work waits to be placed (a
	// Pod no node takes): the task's pending_reason while the attempt is
	// the task's live one (setBuildingReason).
	PendingReason string
}

// ReportResult tells the caller what a report changed.
type ReportResult struct {
	// Proceed is false when the executor must stop the attempt.
	Proceed bool
	// Evaluate is true when the scheduler must now decide the task's fate.
	Evaluate bool
	Task     Task
	// Attempt is the attempt as it was before the report.
	Attempt Attempt
}

// ErrBadReport: the reported state cannot follow the attempt's state.
var ErrBadReport = errors.New("invalid attempt report")

// applyDecided applies report rep about attempt id as decision d says,
// over the rows locked holds: a refusal is its error (ErrNotFound for an
// attempt unknown or not held, ErrBadReport for a state that cannot
// follow), an ignored report writes nothing, an applied one is laid over
// the rows (applyReport). The result carries d's answers and the rows as
// they were before the report. Its errors but Postgres's come before any
// write.
func (s *core) applyDecided(ctx context.Context, locked lockedRows, id int64, rep Report,
	d domain.ReportDecision) (ReportResult, error) {
	ta, ok := locked[id]
	if !ok || d.Verdict == domain.ReportUnknown || d.Verdict == domain.ReportNotHeld {
		return ReportResult{}, ErrNotFound
	}
	res := ReportResult{Proceed: d.Proceed, Evaluate: d.Evaluate, Task: ta.task, Attempt: ta.attempt}
	if rep.State == domain.TaskBuilding && rep.PendingReason != "" && d.Proceed && d.Verdict != domain.ReportCannotFollow {
		if err := s.setBuildingReason(ctx, ta.task.ID, rep.PendingReason); err != nil {
			return res, err
		}
	}
	switch d.Verdict {
	case domain.ReportCannotFollow:
		return res, ErrBadReport
	case domain.ReportApply:
		return res, s.applyReport(ctx, locked, ta.task, ta.attempt, id, rep, d)
	}
	return res, nil
}

// applyReport takes a report decision d applies: it records what a
// terminal report carries and the "attempt.<STATE>" event, and lays the
// attempt's columns, and the task's state when d moves it, over those its
// earlier reports in the transaction left in locked, for writeReports to
// write at the transaction's end: an executor's RUNNING and SUCCEEDED of a
// short attempt, sent together, cost one UPDATE, and a batch's attempts
// one statement. The rows as they will be written replace t and a in
// locked. Times are kept to the microsecond, as Postgres keeps them.
func (s *core) applyReport(ctx context.Context, locked lockedRows, t Task, a Attempt, id int64, rep Report,
	d domain.ReportDecision) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	up, err := reportUpdates(a, rep, d.Evaluate, now)
	if err != nil {
		return err
	}
	if err := s.recordFinal(ctx, t, id, rep); err != nil {
		return err
	}
	w := locked[id].pending
	w.add(up, d.MoveTask, rep.State)
	after := taskAttempt{task: t, attempt: a, pending: w}
	after.attempt.State, after.attempt.UpdatedAt = rep.State, now
	if rep.Pid != nil {
		after.attempt.Pid = rep.Pid
	}
	if _, ok := up["started_at"]; ok {
		after.attempt.StartedAt = &now
	}
	if rep.State.IsTerminal() {
		after.attempt.FinishedAt = &now
	}
	if w.task != nil {
		after.task.State = *w.task
	}
	locked[id] = after
	return s.taskEvent(ctx, t, id, "attempt."+rep.State.String(),
		map[string]any{"exit_code": rep.ExitCode, "cause": rep.Cause, "error": rep.Error})
}

// buildingReasonSQL sets task @id's pending_reason to @reason while the
// task is BUILDING (its attempt placed, its work not yet running), bumping
// its version when it changes. The report's transaction holds the task's
// lock already.
var buildingReasonSQL = `UPDATE tasks SET pending_reason = @reason, updated_at = now(), version = version + 1
WHERE id = @id AND state IN ` + sqlStates(domain.TaskBuilding) + ` AND pending_reason IS DISTINCT FROM @reason`

// setBuildingReason records why a live attempt's work waits to be placed
// as its task's pending_reason (buildingReasonSQL). Errors: Postgres's.
func (s *core) setBuildingReason(ctx context.Context, task int64, reason string) error {
	return mapErr(s.exec(ctx, buildingReasonSQL, map[string]any{"id": task, "reason": reason}).Error)
}

// taskAttempt is an attempt and its task as locked in a transaction, with
// what its reports there have laid over them, and those reports' columns,
// which writeReports writes at the transaction's end.
type taskAttempt struct {
	task    Task
	attempt Attempt
	pending pendingWrite
}

// lockedRows holds, by attempt id, the attempts a transaction has locked
// with their tasks (LockForReport), as its reports leave them: a batch's
// reports read them instead of locking each attempt again.
type lockedRows map[int64]taskAttempt

// recordFinal stores what a terminal report carries besides the attempt's
// columns: its bounded logs and its cleanup steps' events, in order.
func (s *core) recordFinal(ctx context.Context, t Task, id int64, rep Report) error {
	if !rep.State.IsTerminal() {
		return nil
	}
	if rep.Stdout != "" || rep.Stderr != "" {
		res := s.exec(ctx, insertFinalLogSQL, map[string]any{"id": id, "stdout": rep.Stdout, "stderr": rep.Stderr,
			"truncated": rep.Truncated, "now": dbNow()})
		if err := mapErr(res.Error); err != nil {
			return err
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%w: attempt_logs of attempt %d", ErrConflict, id)
		}
	}
	return s.cleanupEvents(ctx, t, id, rep.Cleanup)
}

// insertFinalLogSQL inserts attempt @id's attempt_logs row unless it has
// one. The table is partitioned by created_at, so no unique index can hold
// an attempt to one row across its partitions; this statement does, run
// under the attempt's row lock (the report's, FOR UPDATE) by the one
// report that makes the attempt terminal. It probes each partition's
// primary key (attempt_id leads it).
const insertFinalLogSQL = `INSERT INTO attempt_logs (attempt_id, stdout, stderr, truncated, created_at)
SELECT CAST(@id AS bigint), CAST(@stdout AS text), CAST(@stderr AS text), CAST(@truncated AS boolean),
       CAST(@now AS timestamptz)
 WHERE NOT EXISTS (SELECT 1 FROM attempt_logs WHERE attempt_id = CAST(@id AS bigint))`

// reportUpdates returns the attempt's columns a report sets: its state,
// pid, start, and for a terminal state its end, exit code, error, cause,
// code, outputs (SUCCEEDED only) and, when the attempt needs no evaluation,
// evaluated_at.
func reportUpdates(a Attempt, rep Report, evaluate bool, now time.Time) (map[string]any, error) {
	up := map[string]any{"state": rep.State, "updated_at": now}
	if rep.Pid != nil {
		up["pid"] = *rep.Pid
	}
	if rep.State == domain.TaskRunning && a.StartedAt == nil {
		up["started_at"] = now
	}
	if !rep.State.IsTerminal() {
		return up, nil
	}
	up["finished_at"], up["exit_code"], up["error"], up["cause"] = now, rep.ExitCode, strPtr(rep.Error), strPtr(rep.Cause)
	up["code"] = strPtr(rep.Code)
	if !evaluate {
		up["evaluated_at"] = now
	}
	if rep.State == domain.TaskSucceeded && len(rep.Outputs) > 0 {
		raw, err := encodeRows(rep.Outputs)
		if err != nil {
			return nil, fmt.Errorf("encode outputs: %w", err)
		}
		up["outputs"] = json.RawMessage(raw)
	}
	return up, nil
}

// lockTaskAttempt locks an attempt's task, then the attempt (the lock order:
// task before attempt), in one statement, and returns them. Errors:
// ErrNotFound.
func (s *core) lockTaskAttempt(ctx context.Context, id int64) (Task, Attempt, error) {
	var a Attempt
	var t Task
	err := scanRows(s.raw(ctx, `SELECT row_to_json(t), row_to_json(at)
		FROM attempts at JOIN tasks t ON t.id = at.task_id WHERE at.id = ? FOR UPDATE OF t, at`, id), &t, &a)
	return t, a, err
}
