package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/workerapi"
)

// ReportAttempts records a batch of an executor's reports and logs about
// attempts placed on its worker, in one transaction and in order, and asks
// the scheduler in one message to decide the fate of the tasks whose
// attempts ended; then a heartbeat riding along is recorded as Heartbeat
// records one, and answered in the reply's stop (404: the worker must
// re-register). Each report is checked as ReportAttempt checks one, each
// logs item as AppendAttemptLogs checks its chunks; an item that is not
// one, or about an attempt unknown here or another worker's, gets its
// problem (400, 404, 409) in its result and does not stop the others.
func (h *Handlers) ReportAttempts(ctx context.Context, req workerapi.ReportAttemptsRequestObject) (workerapi.ReportAttemptsResponseObject, error) {
	items := req.Body.Reports
	out := make([]workerapi.BatchedReportResult, len(items))
	batch := make([]store.BatchedReport, 0, len(items))
	at := make([]int, 0, len(items)) // out index of each batch entry
	for i, it := range items {
		out[i].AttemptId = it.AttemptId
		b, bad, err := h.checkBatchItem(ctx, it)
		if err != nil {
			return nil, err
		}
		if bad != nil {
			out[i].Error = bad
			continue
		}
		batch = append(batch, b)
		at = append(at, i)
	}
	// A batch received whole is recorded whole, even when its executor
	// dies meanwhile: those are facts, and a batch lost with its sender
	// would run its ended attempts again.
	ctx = context.WithoutCancel(ctx)
	results, err := recordReports(ctx, h.store, req.Id.String(), batch, h.cfg.LogMaxBytes)
	if err != nil {
		return nil, fmt.Errorf("record a batch of %d reports of worker %s: %w", len(batch), req.Id, err)
	}
	var ended []int64
	for j, res := range results {
		i := at[j]
		if p, ok := problemFor(res.Err, subject{kind: "attempt", state: batch[j].Report.State.String()}); ok {
			out[i].Error = &p
			continue
		}
		out[i].Proceed = res.Proceed
		if batch[j].Logs != nil {
			continue
		}
		h.reported(batch[j].Report, res.ReportResult)
		if res.Evaluate {
			ended = append(ended, batch[j].AttemptID)
		}
	}
	h.evaluate(ctx, ended)
	reply := workerapi.ReportAttempts200JSONResponse{Results: out}
	if req.Body.Heartbeat != nil {
		stop, unknown, err := h.beat(ctx, req.Id.String(), req.Body.Heartbeat)
		switch {
		case unknown != nil:
			return asNotFound[workerapi.ReportAttempts404ApplicationProblemPlusJSONResponse](*unknown), nil
		case err != nil:
			return nil, err
		}
		if stop == nil {
			stop = []int64{}
		}
		reply.Stop = &stop
	}
	return reply, nil
}

// checkBatchItem checks one item of a batch and returns it in the store's
// form: a report (checkReport), or logs with NUL refused and the attempt's
// secrets masked; bad is the 400 problem of an item that is neither or
// both, or not valid. Errors: reading the secrets.
func (h *Handlers) checkBatchItem(ctx context.Context, it workerapi.BatchedReport) (store.BatchedReport, *api.Problem, error) {
	b := store.BatchedReport{AttemptID: it.AttemptId}
	switch {
	case (it.Report == nil) == (it.Logs == nil):
		const msg = "an item is a report or logs, not both or neither"
		p := apiProblem(http.StatusBadRequest, problem.CodeInvalid, msg, domain.FieldError{Field: "report", Message: msg})
		return b, &p, nil
	case it.Report != nil:
		rep, bad, err := h.checkReport(ctx, it.AttemptId, it.Report)
		b.Report = rep
		return b, bad, err
	}
	logs, bad, err := h.checkChunks(ctx, it.AttemptId, *it.Logs, "logs")
	b.Logs = logs
	return b, bad, err
}

// recordReports records worker's batch (worker "" for a lone report, whose
// reporter is not named) in one transaction, in order: it locks the
// batch's tasks and attempts (LockForReport), decides its reports over
// them (domain.DecideReports), and applies every item as decided, the
// batch's attempts written in one statement (ApplyReports). It returns one
// result per item, in order; an item refused does not stop the others.
// Errors: Postgres's, which roll the whole batch back.
func recordReports(ctx context.Context, st *store.Store, worker string, batch []store.BatchedReport, logMax int64) (
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
