package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/capstan-run/capstan/pkg/domain"
)

// BatchedReport is one item of a batch, about attempt AttemptID: a report,
// or, when Logs is not nil, output chunks to append (as AppendLogChunks).
type BatchedReport struct {
	AttemptID int64
	Report    Report
	Logs      []NewLogChunk
}

// BatchedResult is what one item of a batch changed (ApplyReports), or
// Err: ErrNotFound (no such attempt on this worker) or ErrBadReport (a
// state the attempt cannot move to). The other items of the batch are
// applied all the same.
type BatchedResult struct {
	ReportResult
	Err error
}

// ReportRows are the attempts, with their tasks, that a transaction
// recording reports locked (LockForReport), as the reports it applied so
// far leave them, with what those reports will write.
type ReportRows struct{ locked lockedRows }

// Facts returns what the report rule reads (domain.DecideReports) of each
// locked attempt and its task, by attempt id.
func (r *ReportRows) Facts() map[int64]domain.AttemptFacts {
	out := make(map[int64]domain.AttemptFacts, len(r.locked))
	for id, ta := range r.locked {
		f := domain.AttemptFacts{State: ta.attempt.State, Number: ta.attempt.Number, TaskState: ta.task.State,
			AttemptCount: ta.task.AttemptCount}
		if ta.attempt.WorkerID != nil {
			f.WorkerID = *ta.attempt.WorkerID
		}
		out[id] = f
	}
	return out
}

// BatchReports returns the reports of batch (its items without Logs), in
// order, as the report rule reads them.
func BatchReports(batch []BatchedReport) []domain.AttemptReport {
	out := make([]domain.AttemptReport, 0, len(batch))
	for _, b := range batch {
		if b.Logs == nil {
			out = append(out, domain.AttemptReport{AttemptID: b.AttemptID, State: b.Report.State})
		}
	}
	return out
}

// LockForReport locks, in the caller's transaction, the tasks, then the
// attempts, of a batch about several attempts, each in id order, in two
// statements; a batch about one attempt with a report locks it in one (a
// logs-only one locks nothing). An attempt that does not exist is missing
// from the rows. A batch with a report runs on the by-key pool (the
// transaction begins there): its locks take lists of ids, and its write
// (ApplyReports) reads its attempts from a JSON array, which a main pool's
// plan expects to hold 100 and joined to a sequential scan of the
// attempts. A batch of logs alone stays on the main pool. Errors:
// Postgres's.
func (s Attempts) LockForReport(ctx context.Context, batch []BatchedReport) (*ReportRows, error) {
	on := s.core
	if slices.ContainsFunc(batch, func(b BatchedReport) bool { return b.Logs == nil }) {
		on = s.prefer(poolByKey)
	}
	locked, err := on.lockBatch(ctx, batch)
	if err != nil {
		return nil, err
	}
	return &ReportRows{locked: locked}, nil
}

// ApplyReports records, in the caller's transaction and in order, the
// items of worker's batch whose rows LockForReport locked: each report as
// its decision says (decisions holds one per report, in order:
// domain.DecideReports over rows.Facts and BatchReports), each logs item
// as AppendLogsBounded to logMax bytes kept (ErrNotFound for an attempt
// unknown or placed on another worker; logs resent are appended again).
// An applied report stores its attempt's new columns, what a terminal one
// carries (bounded logs, its cleanup steps as "plugin_abort" and
// "plugin_finalize" events, in order, before the "attempt.<STATE>" event,
// outputs when SUCCEEDED, evaluated_at when it asks no evaluation) and,
// when the decision moves it, the task's state; the batch's attempts are
// written at its end in one statement, each with its reports' columns
// laid over one another. It returns one result per item, in order, whose
// Err is ErrNotFound or ErrBadReport for an item refused: the other items
// apply all the same. Errors: decisions not one per report, and
// Postgres's, which roll the whole transaction back.
func (s Attempts) ApplyReports(ctx context.Context, rows *ReportRows, worker string, batch []BatchedReport,
	decisions []domain.ReportDecision, logMax int64) ([]BatchedResult, error) {
	out := make([]BatchedResult, len(batch))
	next := 0
	for i, b := range batch {
		var res ReportResult
		var err error
		switch {
		case b.Logs != nil:
			err = s.appendBatchLogs(ctx, worker, b.AttemptID, b.Logs, logMax)
			res.Proceed = err == nil
		case next == len(decisions):
			return nil, errors.New("store: a report batch has more reports than decisions")
		default:
			res, err = s.applyDecided(ctx, rows.locked, b.AttemptID, b.Report, decisions[next])
			next++
		}
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrBadReport) {
			return nil, err
		}
		out[i] = BatchedResult{ReportResult: res, Err: err}
	}
	if next != len(decisions) {
		return nil, errors.New("store: a report batch has more decisions than reports")
	}
	if err := s.writeReports(ctx, rows.locked); err != nil {
		return nil, err
	}
	return out, nil
}

// lockBatch is LockForReport on s: it returns the locked rows by attempt
// id.
func (s *core) lockBatch(ctx context.Context, batch []BatchedReport) (lockedRows, error) {
	ids := make([]int64, 0, len(batch))
	seen := map[int64]bool{}
	reports := false
	for _, b := range batch {
		reports = reports || b.Logs == nil
		if !seen[b.AttemptID] {
			seen[b.AttemptID] = true
			ids = append(ids, b.AttemptID)
		}
	}
	locked := lockedRows{}
	if len(ids) == 0 || len(ids) == 1 && !reports {
		return locked, nil
	}
	if len(ids) == 1 {
		t, a, err := s.lockTaskAttempt(ctx, ids[0])
		switch {
		case errors.Is(err, ErrNotFound):
			return locked, nil
		case err != nil:
			return nil, err
		}
		locked[ids[0]] = taskAttempt{task: t, attempt: a}
		return locked, nil
	}
	var tasks []int64
	if err := s.raw(ctx, `SELECT id FROM tasks WHERE id IN (SELECT task_id FROM attempts WHERE id IN ?)
		ORDER BY id FOR UPDATE`, ids).Scan(&tasks).Error; err != nil {
		return nil, mapErr(err)
	}
	// The tasks are ours now, so this statement's snapshot has their last
	// versions; the attempts' come from their locks.
	rows, err := s.raw(ctx, `SELECT row_to_json(t), row_to_json(at) FROM attempts at JOIN tasks t ON t.id = at.task_id
		WHERE at.id IN ? ORDER BY at.id FOR UPDATE OF at`, ids).Rows()
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var rawT, rawA []byte
		var ta taskAttempt
		if err := rows.Scan(&rawT, &rawA); err != nil {
			return nil, mapErr(err)
		}
		if err := decodeEach([][]byte{rawT, rawA}, &ta.task, &ta.attempt); err != nil {
			return nil, fmt.Errorf("decode locked rows: %w", err)
		}
		locked[ta.attempt.ID] = ta
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return locked, nil
}

// appendBatchLogs appends a logs item of worker's batch: ErrNotFound for an
// attempt unknown or placed on another worker.
func (s *core) appendBatchLogs(ctx context.Context, worker string, id int64, chunks []NewLogChunk, logMax int64) error {
	var owners []string
	if err := s.raw(ctx, `SELECT worker_id FROM attempts WHERE id = ? AND worker_id = ?`, id, worker).
		Scan(&owners).Error; err != nil {
		return mapErr(err)
	}
	if len(owners) == 0 {
		return ErrNotFound
	}
	return s.logs().AppendLogsBounded(ctx, id, chunks, logMax)
}

// pendingWrite is what reports of one attempt will write: the attempt's
// columns, later reports' values over earlier ones', and the task's state
// (nil: the task is not written).
type pendingWrite struct {
	up   map[string]any
	task *domain.TaskState
}

// add lays a report's attempt columns over w's and, when moveTask, sets the
// task's state to state.
func (w *pendingWrite) add(up map[string]any, moveTask bool, state domain.TaskState) {
	if w.up == nil {
		w.up = map[string]any{}
	}
	maps.Copy(w.up, up)
	if moveTask {
		w.task = &state
	}
}

// reportColumns are the attempt columns a report may set (reportUpdates),
// all of which writeReportsSQL writes.
var reportColumns = []string{"state", "updated_at", "pid", "started_at", "finished_at", "exit_code", "error",
	"cause", "code", "evaluated_at", "outputs"}

// writeReportsSQL writes the reports of a transaction's attempts (@rows,
// a JSON array of writeReports's rows) in one statement: each attempt's
// columns as its patch has them over the row as it is (jsonb_populate_record
// keeps a column the patch does not name), and the state of the tasks a
// live report moved (a task that runs has no pending_reason left). Both
// are reached by their keys; the transaction
// holds their locks already.
var writeReportsSQL = `WITH w AS (SELECT * FROM jsonb_to_recordset(CAST(@rows AS jsonb))
	  AS w(id bigint, patch jsonb, task_id bigint, task_state smallint, at timestamptz)),
	t AS (UPDATE tasks t SET state = w.task_state, updated_at = w.at, version = t.version + 1,
	    pending_reason = CASE WHEN w.task_state = ` + strconv.Itoa(int(domain.TaskRunning)) + ` THEN NULL ELSE t.pending_reason END
	  FROM w WHERE t.id = w.task_id AND w.task_state IS NOT NULL)
UPDATE attempts a SET (` + strings.Join(reportColumns, ", ") + `) =
	(SELECT p.` + strings.Join(reportColumns, ", p.") + ` FROM jsonb_populate_record(a, w.patch) p)
FROM w WHERE a.id = w.id`

// reportWrite is one row of writeReportsSQL.
type reportWrite struct {
	ID        int64             `json:"id"`
	Patch     map[string]any    `json:"patch"`
	TaskID    int64             `json:"task_id"`
	TaskState *domain.TaskState `json:"task_state"`
	At        any               `json:"at"`
}

// writeReports writes what the transaction's reports left in locked, every
// attempt in one statement (writeReportsSQL). Errors: ErrNotFound when an
// attempt is gone, and Postgres's.
func (s *core) writeReports(ctx context.Context, locked lockedRows) error {
	var rows []reportWrite
	for _, id := range slices.Sorted(maps.Keys(locked)) {
		ta := locked[id]
		if ta.pending.up == nil {
			continue
		}
		for c := range ta.pending.up {
			if !slices.Contains(reportColumns, c) {
				return fmt.Errorf("report sets %s, which is not among reportColumns", c)
			}
		}
		rows = append(rows, reportWrite{ID: id, Patch: ta.pending.up, TaskID: ta.task.ID, TaskState: ta.pending.task,
			At: ta.pending.up["updated_at"]})
	}
	if len(rows) == 0 {
		return nil
	}
	raw, err := encodeRows(rows)
	if err != nil {
		return fmt.Errorf("encode reports: %w", err)
	}
	res := s.exec(ctx, writeReportsSQL, map[string]any{"rows": string(raw)})
	if res.Error != nil {
		return mapErr(res.Error)
	}
	if res.RowsAffected != int64(len(rows)) {
		return ErrNotFound
	}
	return nil
}
