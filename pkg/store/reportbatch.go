package store

import (
	"context"
	"errors"
)

// BatchedReport is one report of a batch: about attempt AttemptID.
type BatchedReport struct {
	AttemptID int64
	Report    Report
}

// BatchedResult is what one report of a batch changed (as ReportAttempt's
// result), or Err: ErrNotFound (no such attempt on this worker) or
// ErrBadReport (a state the attempt cannot move to). The other reports of
// the batch are applied all the same.
type BatchedResult struct {
	ReportResult
	Err error
}

// ReportAttempts records a batch of reports of worker's executor in one
// transaction, in order (the reports of one attempt apply in the batch's
// order), each as ReportAttempt, and refuses a report about an attempt
// placed on another worker. Resending a batch writes nothing new: a report
// of the live state an attempt is in already, or about an attempt that
// ended, is a no-op (and asks for no evaluation). It returns one result per
// report, in order. Errors: those of Postgres, which roll the whole batch
// back.
func (s *Store) ReportAttempts(ctx context.Context, worker string, batch []BatchedReport) ([]BatchedResult, error) {
	out := make([]BatchedResult, len(batch))
	err := s.InTx(ctx, func(tx *Store) error {
		for i, b := range batch {
			res, err := tx.report(ctx, b.AttemptID, worker, b.Report)
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
