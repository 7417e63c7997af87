package storetest

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// The api records what executors report: a test that needs reports or
// heartbeats without the api records them here, with the same store
// statements and the same rules of pkg/domain, composed as the api
// composes them. Set-up only: the api's tests drive its own path.

// ReportAttempts records worker's batch (worker "" for a reporter not
// named) in one transaction: its rows locked (LockForReport), its reports
// decided (domain.DecideReports) and its items applied (ApplyReports). It
// returns one result per item, in order. Errors: Postgres's.
func ReportAttempts(ctx context.Context, st *store.Store, worker string, batch []store.BatchedReport, logMax int64) (
	[]store.BatchedResult, error) {
	var out []store.BatchedResult
	err := st.InTx(ctx, func(tx *store.Store) error {
		rows, err := tx.Attempts().LockForReport(ctx, batch)
		if err != nil {
			return err
		}
		decisions := domain.DecideReports(rows.Facts(), worker, store.BatchReports(batch))
		out, err = tx.Attempts().ApplyReports(ctx, rows, worker, batch, decisions, logMax)
		return err
	})
	return out, err
}

// ReportAttempt records rep about attempt id as a lone report: a batch of
// one whose reporter is not named. Errors: store.ErrNotFound,
// store.ErrBadReport, and Postgres's.
func ReportAttempt(ctx context.Context, st *store.Store, id int64, rep store.Report) (store.ReportResult, error) {
	res, err := ReportAttempts(ctx, st, "", []store.BatchedReport{{AttemptID: id, Report: rep}}, 1<<20)
	if err != nil {
		return store.ReportResult{}, err
	}
	return res[0].ReportResult, res[0].Err
}

// Beat is one heartbeat of a worker.
type Beat struct {
	// Held lists the attempts the worker holds.
	Held []int64
	// Draining is true once the executor is shutting down; it is sticky.
	Draining bool
}

// BeatReply is what a heartbeat changed: the held attempts the worker must
// stop, and the attempts it lost, now WORKER_FAILED and to be evaluated.
type BeatReply struct {
	Stop []int64
	Lost []store.LostAttempt
}

// Heartbeat records worker id's heartbeat b in one transaction: the held
// attempts to stop (StopList), the attempts lost as domain.LossOnBeat of
// the previous heartbeat declares them (LoseUnheldAttempts), then the
// beat (RecordBeat, stamped with Postgres's now(): a test makes a worker
// silent with Silence). Errors: store.ErrNotFound when the worker is
// unknown or dead.
func Heartbeat(ctx context.Context, st *store.Store, id string, b Beat) (BeatReply, error) {
	at := time.Now().UTC()
	var reply BeatReply
	err := st.InTx(ctx, func(tx *store.Store) error {
		previous, err := tx.Workers().LastHeartbeat(ctx, id)
		if err != nil {
			return err
		}
		if reply.Stop, err = tx.Workers().StopList(ctx, id, b.Held); err != nil {
			return err
		}
		if reply.Lost, err = tx.Workers().LoseUnheldAttempts(ctx, id, b.Held, domain.LossOnBeat(previous), at); err != nil {
			return err
		}
		return tx.Workers().RecordBeat(ctx, id, b.Draining)
	})
	return reply, err
}
