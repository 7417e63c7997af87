package store

import (
	"context"
	"errors"
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
// whole batch back.
func (s *Store) ReportAttempts(ctx context.Context, worker string, batch []BatchedReport, logMax int64) ([]BatchedResult, error) {
	out := make([]BatchedResult, len(batch))
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.lockBatch(ctx, batch); err != nil {
			return err
		}
		for i, b := range batch {
			var res ReportResult
			var err error
			if b.Logs != nil {
				err = tx.appendBatchLogs(ctx, worker, b.AttemptID, b.Logs, logMax)
				res.Proceed = err == nil
			} else {
				res, err = tx.report(ctx, b.AttemptID, worker, b.Report)
			}
			if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrBadReport) {
				return err
			}
			out[i] = BatchedResult{ReportResult: res, Err: err}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// lockBatch locks the tasks, then the attempts, of a batch about several
// attempts, each in id order, in two statements.
func (s *Store) lockBatch(ctx context.Context, batch []BatchedReport) error {
	ids := make([]int64, 0, len(batch))
	seen := map[int64]bool{}
	for _, b := range batch {
		if !seen[b.AttemptID] {
			seen[b.AttemptID] = true
			ids = append(ids, b.AttemptID)
		}
	}
	if len(ids) < 2 {
		return nil
	}
	var locked []int64
	if err := s.q(ctx).Raw(`SELECT id FROM tasks WHERE id IN (SELECT task_id FROM attempts WHERE id IN ?)
		ORDER BY id FOR UPDATE`, ids).Scan(&locked).Error; err != nil {
		return mapErr(err)
	}
	return mapErr(s.q(ctx).Raw(`SELECT id FROM attempts WHERE id IN ? ORDER BY id FOR UPDATE`, ids).Scan(&locked).Error)
}

// appendBatchLogs appends a logs item of worker's batch: ErrNotFound for an
// attempt unknown or placed on another worker.
func (s *Store) appendBatchLogs(ctx context.Context, worker string, id int64, chunks []NewLogChunk, logMax int64) error {
	var owners []string
	if err := s.q(ctx).Raw(`SELECT worker_id FROM attempts WHERE id = ? AND worker_id = ?`, id, worker).
		Scan(&owners).Error; err != nil {
		return mapErr(err)
	}
	if len(owners) == 0 {
		return ErrNotFound
	}
	return s.AppendLogsBounded(ctx, id, chunks, logMax)
}
