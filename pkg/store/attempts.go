package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
)

// AttemptRun is what an executor needs to run one attempt.
type AttemptRun struct {
	Attempt Attempt
	Task    Task
	Action  Action
	// Proceed is false when the attempt must not (or no longer) run.
	Proceed bool
}

// GetAttemptRun loads an attempt with its task and action, in one round trip
// (the rows as JSON, as in detailsSQL). Errors: ErrNotFound.
func (s *Store) GetAttemptRun(ctx context.Context, id int64) (AttemptRun, error) {
	var r AttemptRun
	var rawAttempt, rawTask, rawAction []byte
	err := s.q(ctx).Raw(`SELECT row_to_json(at), row_to_json(t), row_to_json(a)
		FROM attempts at JOIN tasks t ON t.id = at.task_id
		JOIN actions a ON (a.project, a.domain, a.run_name, a.name) = (t.project, t.domain, t.run_name, t.action_name)
		WHERE at.id = ?`, id).Row().Scan(&rawAttempt, &rawTask, &rawAction)
	if errors.Is(err, sql.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, mapErr(err)
	}
	if err := decodeEach([][]byte{rawAttempt, rawTask, rawAction}, &r.Attempt, &r.Task, &r.Action); err != nil {
		return r, fmt.Errorf("attempt %d: decode rows: %w", id, err)
	}
	r.Proceed = proceed(r.Attempt, r.Task)
	return r, nil
}

// proceed reports whether the attempt is still the task's current one and
// both are live.
func proceed(a Attempt, t Task) bool {
	return domain.TaskState(a.State).IsLive() && domain.TaskState(t.State).IsLive() && t.AttemptCount == a.Number
}

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
}

// ReportResult tells the caller what a report changed.
type ReportResult struct {
	// Proceed is false when the executor must stop the attempt.
	Proceed bool
	// Evaluate is true when the scheduler must now decide the task's fate.
	Evaluate bool
	Task     Task
}

// ErrBadReport: the reported state cannot follow the attempt's state.
var ErrBadReport = errors.New("invalid attempt report")

// ReportAttempt records a report: the attempt's new state (only forward:
// ASSIGNED -> BUILDING -> RUNNING -> terminal), its exit code, error, cause
// and bounded logs; a live report also moves the task. A report on an attempt
// that already ended is a no-op. Errors: ErrNotFound, ErrBadReport.
func (s *Store) ReportAttempt(ctx context.Context, id int64, rep Report) (ReportResult, error) {
	var res ReportResult
	err := s.InTx(ctx, func(tx *Store) error {
		a, t, err := tx.lockAttemptTask(ctx, id)
		if err != nil {
			return err
		}
		res.Task = t
		cur := domain.TaskState(a.State)
		if cur.IsTerminal() {
			return nil // duplicate or late report
		}
		if !rep.State.IsTerminal() && rep.State != domain.TaskBuilding && rep.State != domain.TaskRunning ||
			rep.State == domain.TaskBuilding && cur == domain.TaskRunning {
			return ErrBadReport
		}
		live := proceed(a, res.Task)
		res.Proceed = live && !rep.State.IsTerminal()
		now := time.Now().UTC()
		up := map[string]any{"state": int16(rep.State), "updated_at": now}
		if rep.Pid != nil {
			up["pid"] = *rep.Pid
		}
		if rep.State == domain.TaskRunning && a.StartedAt == nil {
			up["started_at"] = now
		}
		if rep.State.IsTerminal() {
			up["finished_at"], up["exit_code"], up["error"], up["cause"] = now, rep.ExitCode, strPtr(rep.Error), strPtr(rep.Cause)
			// An attempt whose task moved on (aborted, superseded) needs no decision.
			res.Evaluate = live
			if !live {
				up["evaluated_at"] = now
			}
		}
		if err := tx.q(ctx).Model(&Attempt{}).Where("id = ?", id).Updates(up).Error; err != nil {
			return mapErr(err)
		}
		if rep.State.IsTerminal() && (rep.Stdout != "" || rep.Stderr != "") {
			if err := tx.q(ctx).Create(&AttemptLog{AttemptID: id, Stdout: rep.Stdout, Stderr: rep.Stderr,
				Truncated: rep.Truncated}).Error; err != nil {
				return mapErr(err)
			}
		}
		if live && !rep.State.IsTerminal() {
			if err := tx.q(ctx).Model(&Task{}).Where("id = ?", res.Task.ID).Updates(map[string]any{
				"state": int16(rep.State), "updated_at": now, "version": gorm.Expr("version + 1")}).Error; err != nil {
				return mapErr(err)
			}
		}
		return tx.eventFull(ctx, RunEvent{Project: res.Task.Project, Domain: res.Task.Domain, RunName: res.Task.RunName,
			ActionName: &res.Task.ActionName, TaskID: &res.Task.ID, AttemptID: &id, Type: "attempt." + rep.State.String()},
			map[string]any{"exit_code": rep.ExitCode, "cause": rep.Cause, "error": rep.Error})
	})
	return res, err
}

// lockAttemptTask locks an attempt's row, then its task's, in one statement
// and returns them. Errors: ErrNotFound.
func (s *Store) lockAttemptTask(ctx context.Context, id int64) (Attempt, Task, error) {
	var a Attempt
	var t Task
	var rawAttempt, rawTask []byte
	err := s.q(ctx).Raw(`SELECT row_to_json(at), row_to_json(t)
		FROM attempts at JOIN tasks t ON t.id = at.task_id WHERE at.id = ? FOR UPDATE OF at, t`, id).
		Row().Scan(&rawAttempt, &rawTask)
	if errors.Is(err, sql.ErrNoRows) {
		return a, t, ErrNotFound
	}
	if err != nil {
		return a, t, mapErr(err)
	}
	if err := decodeEach([][]byte{rawAttempt, rawTask}, &a, &t); err != nil {
		return a, t, fmt.Errorf("attempt %d: decode rows: %w", id, err)
	}
	return a, t, nil
}

// GetAttemptLogs returns the logs of attempt number n of task idx of an
// action. Errors: ErrNotFound (no such attempt); an attempt with no output
// yet returns empty logs.
func (s *Store) GetAttemptLogs(ctx context.Context, key domain.ActionKey, idx, n int) (AttemptLog, error) {
	var a Attempt
	err := s.q(ctx).Raw(`SELECT at.* FROM attempts at JOIN tasks t ON t.id = at.task_id
		WHERE t.project = ? AND t.domain = ? AND t.run_name = ? AND t.action_name = ? AND t.idx = ? AND at.number = ?`,
		key.Project, key.Domain, key.Run, key.Action, idx, n).Scan(&a).Error
	if err != nil {
		return AttemptLog{}, mapErr(err)
	}
	if a.ID == 0 {
		return AttemptLog{}, ErrNotFound
	}
	var l AttemptLog
	err = s.q(ctx).Where("attempt_id = ?", a.ID).Take(&l).Error
	if errors.Is(mapErr(err), ErrNotFound) {
		return AttemptLog{AttemptID: a.ID}, nil
	}
	return l, mapErr(err)
}
