package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// BatchedResult is what one item of a batch changed (for a report, as
// ReportAttempt's result), or Err: ErrNotFound (no such attempt on this
// worker) or ErrBadReport (a state the attempt cannot move to). The other
// items of the batch are applied all the same.
type BatchedResult struct {
	ReportResult
	Err error
}

// ReportAttempts records a batch of worker's executor in one transaction,
// in order (the items of one attempt apply in the batch's order): each
// report as ReportAttempt, each logs item as AppendLogsBounded to logMax
// bytes kept. An item about an attempt
// placed on another worker is refused. Resending a batch writes no report
// twice: a report of the live state an attempt is in already, or about an
// attempt that ended, is a no-op (and asks for no evaluation); logs resent
// are appended again. A batch of several attempts first locks their tasks,
// then the attempts, each in id order (the lock order). It returns one
// result per item, in order. Errors: those of Postgres, which roll the
// whole batch back. A batch with a report runs on ByKey's pool: its locks
// take lists of ids (a batch of 4 reports at 12,000 attempts: 18 ms with
// the plans a main pool's connection kept from the first minute), and its
// write reads its attempts from a JSON array, which a main pool's plan
// expects to hold 100 and joined to a sequential scan of the attempts. A
// batch of logs alone stays on the main pool.
func (s Attempts) ReportAttempts(ctx context.Context, worker string, batch []BatchedReport, logMax int64) ([]BatchedResult, error) {
	out := make([]BatchedResult, len(batch))
	on := s.core
	if slices.ContainsFunc(batch, func(b BatchedReport) bool { return b.Logs == nil }) {
		on = s.prefer(poolByKey)
	}
	err := on.inTx(ctx, func(tx *Store) error {
		locked, err := tx.lockBatch(ctx, batch)
		if err != nil {
			return err
		}
		for i, b := range batch {
			var res ReportResult
			var err error
			if b.Logs != nil {
				err = tx.appendBatchLogs(ctx, worker, b.AttemptID, b.Logs, logMax)
				res.Proceed = err == nil
			} else {
				res, err = tx.report(ctx, locked, b.AttemptID, worker, b.Report)
			}
			if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrBadReport) {
				return err
			}
			out[i] = BatchedResult{ReportResult: res, Err: err}
		}
		return tx.writeReports(ctx, locked)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// lockBatch locks the tasks, then the attempts, of a batch about several
// attempts, each in id order, in two statements; a batch about one attempt
// with a report locks it in one (a logs-only one locks nothing here). It
// returns the locked rows by attempt id: report takes them from there
// instead of locking each attempt again. An attempt that does not exist is
// missing.
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
		_, _, err := locked.get(ctx, s, ids[0])
		if errors.Is(err, ErrNotFound) {
			err = nil
		}
		return locked, err
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
// live report moved. Both are reached by their keys; the transaction
// holds their locks already.
var writeReportsSQL = `WITH w AS (SELECT * FROM jsonb_to_recordset(CAST(@rows AS jsonb))
	  AS w(id bigint, patch jsonb, task_id bigint, task_state smallint, at timestamptz)),
	t AS (UPDATE tasks t SET state = w.task_state, updated_at = w.at, version = t.version + 1
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
