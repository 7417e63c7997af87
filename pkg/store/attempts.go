package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm/clause"
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
func (s Attempts) GetAttemptRun(ctx context.Context, id int64) (AttemptRun, error) {
	var r AttemptRun
	err := scanRows(s.raw(ctx, `SELECT row_to_json(at), row_to_json(t), row_to_json(a)
		FROM attempts at JOIN tasks t ON t.id = at.task_id
		JOIN actions a ON (a.project, a.domain, a.run_name, a.name) = (t.project, t.domain, t.run_name, t.action_name)
		WHERE at.id = ?`, id), &r.Attempt, &r.Task, &r.Action)
	r.Proceed = err == nil && domain.IsCurrentAttempt(r.Attempt.State, r.Task.State, r.Attempt.Number, r.Task.AttemptCount)
	return r, err
}

// GetAttemptRuns loads the attempts ids with their tasks and actions, in
// one statement, by id (a repeated id once); an id of no attempt has no
// row. Several ids are read on ByKey's pool, in an array; one id is
// GetAttemptRun's statement, whose plan the main
// pool keeps (the list's form was planned at each call there: 0.41 ms a
// call at 60 runs/s).
func (s Attempts) GetAttemptRuns(ctx context.Context, ids []int64) ([]AttemptRun, error) {
	switch len(ids) {
	case 0:
		return nil, nil
	case 1:
		r, err := s.GetAttemptRun(ctx, ids[0])
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []AttemptRun{r}, nil
	}
	var raw [3][]byte
	err := s.prefer(poolByKey).raw(ctx, `SELECT coalesce(json_agg(row_to_json(at) ORDER BY at.id), '[]'),
			coalesce(json_agg(row_to_json(t) ORDER BY at.id), '[]'), coalesce(json_agg(row_to_json(a) ORDER BY at.id), '[]')
		FROM attempts at JOIN tasks t ON t.id = at.task_id
		JOIN actions a ON (a.project, a.domain, a.run_name, a.name) = (t.project, t.domain, t.run_name, t.action_name)
		WHERE at.id = ANY(CAST(? AS bigint[]))`, array(ids)).Row().Scan(&raw[0], &raw[1], &raw[2])
	if err != nil {
		return nil, mapErr(err)
	}
	var attempts []Attempt
	var tasks []Task
	var acts []Action
	if err := decodeEach(raw[:], &attempts, &tasks, &acts); err != nil {
		return nil, fmt.Errorf("decode rows: %w", err)
	}
	if len(tasks) != len(attempts) || len(acts) != len(attempts) {
		return nil, fmt.Errorf("decode rows: %d attempts, %d tasks, %d actions", len(attempts), len(tasks), len(acts))
	}
	out := make([]AttemptRun, len(attempts))
	for i := range attempts {
		out[i] = AttemptRun{Attempt: attempts[i], Task: tasks[i], Action: acts[i]}
		out[i].Proceed = domain.IsCurrentAttempt(out[i].Attempt.State, out[i].Task.State, out[i].Attempt.Number,
			out[i].Task.AttemptCount)
	}
	return out, nil
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
	// Outputs are a SUCCEEDED attempt's output values, name → value, stored
	// on the attempt; ignored with any other state.
	Outputs map[string]string
	// Code is a stable error code (e.g. InvalidPluginSpec), stored with a
	// terminal state.
	Code string
	// Cleanup is a stopped attempt's plugin Abort and Finalize as they ran,
	// each recorded as a run event (cleanupEvents) with a terminal state.
	Cleanup []CleanupStep
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

// ReportAttempt records a report: the attempt's new state (only forward:
// ASSIGNED -> BUILDING -> RUNNING -> terminal), its exit code, error, cause,
// code, bounded logs, cleanup steps (as "plugin_abort" and
// "plugin_finalize" events, in order, before the "attempt.<STATE>" event)
// and, when SUCCEEDED, its outputs; a live report also moves the task. A
// report on an attempt that already ended is a no-op. It runs on ByKey's
// pool, as a report batch does (ReportAttempts). Errors: ErrNotFound,
// ErrBadReport.
func (s Attempts) ReportAttempt(ctx context.Context, id int64, rep Report) (ReportResult, error) {
	var res ReportResult
	err := s.prefer(poolByKey).inTx(ctx, func(tx *Store) error {
		locked := lockedRows{}
		var err error
		if res, err = tx.report(ctx, locked, id, "", rep); err != nil {
			return err
		}
		return tx.writeReports(ctx, locked)
	})
	return res, err
}

// report is ReportAttempt inside the caller's transaction. With a worker id
// (a batch) it refuses (ErrNotFound) an attempt placed on another worker,
// and a report of the state the attempt is in already, or of BUILDING when
// it runs (a resent batch), writes nothing. Its errors come before any
// write.
func (s *core) report(ctx context.Context, locked lockedRows, id int64, worker string, rep Report) (ReportResult,
	error) {
	var res ReportResult
	t, a, err := locked.get(ctx, s, id)
	if err == nil && worker != "" && (a.WorkerID == nil || *a.WorkerID != worker) {
		err = ErrNotFound
	}
	if err != nil {
		return res, err
	}
	res.Task, res.Attempt = t, a
	if a.State.IsTerminal() {
		return res, nil // duplicate or late report
	}
	live := domain.IsCurrentAttempt(a.State, t.State, a.Number, t.AttemptCount)
	res.Proceed = live && !rep.State.IsTerminal()
	if worker != "" && (a.State == rep.State || a.State == domain.TaskRunning && rep.State == domain.TaskBuilding) {
		return res, nil // resent: the attempt is there already
	}
	if !domain.CanReport(a.State, rep.State) {
		return res, ErrBadReport
	}
	if err := s.applyReport(ctx, locked, t, a, id, rep, live); err != nil {
		return res, err
	}
	res.Evaluate = (live || killedLast(t, a)) && rep.State.IsTerminal()
	return res, nil
}

// applyReport takes a report the attempt can take: it records what a
// terminal report carries and the "attempt.<STATE>" event, and lays the
// attempt's columns, and the task's state while live, over those its
// earlier reports in the transaction left in locked, for writeReports to
// write at the transaction's end: an executor's RUNNING and SUCCEEDED of a
// short attempt, sent together, cost one UPDATE, and a batch's attempts
// one statement. The rows as they will be written replace t and a in
// locked. Times are kept to the microsecond, as Postgres keeps them.
func (s *core) applyReport(ctx context.Context, locked lockedRows, t Task, a Attempt, id int64, rep Report,
	live bool) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	up, err := reportUpdates(a, rep, live || killedLast(t, a), now)
	if err != nil {
		return err
	}
	if err := s.recordFinal(ctx, t, id, rep); err != nil {
		return err
	}
	w := locked[id].pending
	w.add(up, live && !rep.State.IsTerminal(), rep.State)
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

// taskAttempt is an attempt and its task as locked in a transaction, with
// what its reports there have laid over them, and those reports' columns,
// which writeReports writes at the transaction's end.
type taskAttempt struct {
	task    Task
	attempt Attempt
	pending pendingWrite
}

// lockedRows holds, by attempt id, the attempts a transaction has locked
// with their tasks, as they are now: a batch's reports read them instead of
// locking each attempt again.
type lockedRows map[int64]taskAttempt

// get returns attempt id and its task: from l, else locked by
// lockTaskAttempt (and kept in l). Errors: ErrNotFound.
func (l lockedRows) get(ctx context.Context, s *core, id int64) (Task, Attempt, error) {
	if ta, ok := l[id]; ok {
		return ta.task, ta.attempt, nil
	}
	t, a, err := s.lockTaskAttempt(ctx, id)
	if err == nil && l != nil {
		l[id] = taskAttempt{task: t, attempt: a}
	}
	return t, a, err
}

// killedLast reports whether a is the last attempt of a task an abort
// killed: it is evaluated when it ends, to finish the abort (its ABORTED
// event). An attempt whose task moved on otherwise (superseded) needs no
// decision.
func killedLast(t Task, a Attempt) bool {
	return t.State == domain.TaskKilled && a.Number == t.AttemptCount
}

// recordFinal stores what a terminal report carries besides the attempt's
// columns: its bounded logs and its cleanup steps' events, in order.
func (s *core) recordFinal(ctx context.Context, t Task, id int64, rep Report) error {
	if !rep.State.IsTerminal() {
		return nil
	}
	if rep.Stdout != "" || rep.Stderr != "" {
		if err := s.q(ctx).Create(&AttemptLog{AttemptID: id, Stdout: rep.Stdout, Stderr: rep.Stderr,
			Truncated: rep.Truncated}).Error; err != nil {
			return mapErr(err)
		}
	}
	return s.cleanupEvents(ctx, t, id, rep.Cleanup)
}

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

// LockAndClaimAttempt opens an evaluation in one statement: it locks the
// attempt's run, action and task (the lock order), then marks the attempt
// evaluated at now if it is finished and not yet evaluated. It returns the
// owners with the attempt as read before the claim, and the attempt as
// claimed (ok false: not finished, or evaluated already). Errors:
// ErrNotFound.
func (s Attempts) LockAndClaimAttempt(ctx context.Context, attemptID int64, now time.Time) (o AttemptOwners,
	claimed Attempt, ok bool, err error) {
	var raw [5][]byte
	err = s.raw(ctx, `WITH o AS (SELECT row_to_json(r) AS r, row_to_json(x) AS x, row_to_json(t) AS t, row_to_json(at) AS a
			FROM attempts at JOIN tasks t ON t.id = at.task_id
			JOIN actions x ON (x.project, x.domain, x.run_name, x.name) = (t.project, t.domain, t.run_name, t.action_name)
			JOIN runs r ON (r.project, r.domain, r.name) = (t.project, t.domain, t.run_name)
			WHERE at.id = @id FOR UPDATE OF r, x, t),
		c AS (UPDATE attempts SET evaluated_at = @now, updated_at = @now
			WHERE id = @id AND finished_at IS NOT NULL AND evaluated_at IS NULL AND (SELECT count(*) FROM o) > 0
			RETURNING row_to_json(attempts) AS j)
		SELECT o.r, o.x, o.t, o.a, (SELECT j FROM c) FROM o`, map[string]any{"id": attemptID, "now": now}).
		Row().Scan(&raw[0], &raw[1], &raw[2], &raw[3], &raw[4])
	if errors.Is(err, sql.ErrNoRows) {
		return o, claimed, false, ErrNotFound
	}
	if err != nil {
		return o, claimed, false, mapErr(err)
	}
	if err := decodeEach(raw[:4], &o.Run, &o.Action, &o.Task, &o.Attempt); err != nil {
		return o, claimed, false, fmt.Errorf("decode attempt owners: %w", err)
	}
	if raw[4] == nil {
		return o, claimed, false, nil
	}
	return o, claimed, true, decodeRows(raw[4], &claimed)
}

// AttemptOwners is an attempt with the task, action and run it belongs to.
type AttemptOwners struct {
	Run     Run
	Action  Action
	Task    Task
	Attempt Attempt
}

// PreemptAssignedAttempt ends an attempt that is still ASSIGNED as PREEMPTED
// (cause preempted), evaluated at now, writes an "attempt.PREEMPTED" event
// and returns it; ok is false when the attempt is no longer ASSIGNED.
func (s Attempts) PreemptAssignedAttempt(ctx context.Context, t Task, id int64, now time.Time) (a Attempt, ok bool, err error) {
	var claimed []Attempt
	res := s.q(ctx).Model(&claimed).Clauses(clause.Returning{}).Where("id = ? AND state IN "+sqlAssigned, id).
		Updates(map[string]any{"state": domain.TaskPreempted, "cause": CausePreempted, "finished_at": now,
			"evaluated_at": now, "updated_at": now})
	if res.Error != nil || len(claimed) == 0 {
		return Attempt{}, false, mapErr(res.Error)
	}
	return claimed[0], true, s.taskEvent(ctx, t, id, "attempt."+domain.TaskPreempted.String(),
		map[string]any{"cause": CausePreempted})
}

// UnevaluatedAttempts returns finished attempts whose outcome was not applied.
func (s Attempts) UnevaluatedAttempts(ctx context.Context, limit int) ([]int64, error) {
	var ids []int64
	err := s.q(ctx).Model(&Attempt{}).Where("finished_at IS NOT NULL AND evaluated_at IS NULL").Order("id").
		Limit(limit).Pluck("id", &ids).Error
	return ids, mapErr(err)
}

// AssignedAttempts returns ASSIGNED attempts created before cutoff (their
// dispatch may have been lost with Redis), with their workers.
func (s Attempts) AssignedAttempts(ctx context.Context, cutoff time.Time, limit int) ([]Attempt, error) {
	var as []Attempt
	err := s.q(ctx).Where("state IN "+sqlAssigned+" AND created_at < ?", cutoff).Order("id").
		Limit(limit).Find(&as).Error
	return as, mapErr(err)
}

// LiveOnWorker is a live attempt of a worker, for preemption.
type LiveOnWorker struct {
	AttemptID   int64
	WorkerID    string
	State       domain.TaskState
	Priority    int16
	CPUMillis   int64 `gorm:"column:cpu_millis"`
	MemoryBytes int64
}

// LiveOnWorkers returns the live attempts held by the given workers with
// their tasks' bands and resources.
func (s Placement) LiveOnWorkers(ctx context.Context, workerIDs []string) ([]LiveOnWorker, error) {
	s = Placement{s.prefer(poolPass)}
	if len(workerIDs) == 0 {
		return nil, nil
	}
	var out []LiveOnWorker
	err := s.raw(ctx, `SELECT a.id AS attempt_id, a.worker_id, a.state, t.priority, t.cpu_millis, t.memory_bytes
		FROM attempts a JOIN tasks t ON t.id = a.task_id
		WHERE a.worker_id IN ? AND a.state IN `+sqlLive+` ORDER BY a.id`, workerIDs).Scan(&out).Error
	return out, mapErr(err)
}

// GetAttempt returns one attempt's row. Errors: ErrNotFound.
func (s Attempts) GetAttempt(ctx context.Context, id int64) (Attempt, error) {
	var a Attempt
	return a, mapErr(s.q(ctx).Take(&a, id).Error)
}
