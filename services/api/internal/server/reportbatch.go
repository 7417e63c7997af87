package server

import (
	"context"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/store"
)

// ReportAttempts records a batch of an executor's reports about attempts
// placed on its worker, in one transaction and in order, and asks the
// scheduler in one message to decide the fate of the tasks whose attempts
// ended. Each item is checked as ReportAttempt checks a report; an item
// that is not one, or about an attempt unknown here or another worker's,
// gets its problem (400, 404, 409) in its result and does not stop the
// others.
func (h *Handlers) ReportAttempts(ctx context.Context, req api.ReportAttemptsRequestObject) (api.ReportAttemptsResponseObject, error) {
	items := req.Body.Reports
	out := make([]api.BatchedReportResult, len(items))
	batch := make([]store.BatchedReport, 0, len(items))
	at := make([]int, 0, len(items)) // out index of each batch entry
	for i, it := range items {
		out[i].AttemptId = it.AttemptId
		rep, bad, err := h.checkReport(ctx, it.AttemptId, &it.Report)
		if err != nil {
			return nil, err
		}
		if bad != nil {
			out[i].Error = bad
			continue
		}
		batch = append(batch, store.BatchedReport{AttemptID: it.AttemptId, Report: rep})
		at = append(at, i)
	}
	results, err := h.store.ReportAttempts(ctx, req.Id.String(), batch)
	if err != nil {
		return nil, err
	}
	var ended []int64
	for j, res := range results {
		i := at[j]
		if p, ok := problemFor(res.Err, subject{kind: "attempt", state: batch[j].Report.State.String()}); ok {
			out[i].Error = &p
			continue
		}
		out[i].Proceed = res.Proceed
		h.reported(batch[j].Report, res.ReportResult)
		if res.Evaluate {
			ended = append(ended, batch[j].AttemptID)
		}
	}
	h.evaluate(ctx, ended)
	return api.ReportAttempts200JSONResponse{Results: out}, nil
}
