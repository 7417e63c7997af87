package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/store"
)

// ListAborts returns a page of action aborts and attempt kills, most
// recently updated first; state=needs_intervention is the operator's list of
// what the reconciler gave up on after ABORT_MAX_ATTEMPTS (where Flyte's
// AbortReconciler only logs that manual intervention may be required).
func (h *Handlers) ListAborts(ctx context.Context, req api.ListAbortsRequestObject) (api.ListAbortsResponseObject, error) {
	var f store.AbortFilter
	if req.Params.State != nil {
		f.State = string(*req.Params.State)
	}
	if req.Params.Cursor != nil {
		f.Cursor = *req.Params.Cursor
	}
	if req.Params.Limit != nil {
		f.Limit = *req.Params.Limit
	}
	if req.Params.Project != nil {
		f.Project = *req.Params.Project
	}
	if req.Params.Domain != nil {
		f.Domain = *req.Params.Domain
	}
	if who, ok := principalFrom(ctx); ok {
		f.Projects = who.projects // a scoped token sees its projects' aborts only
	}
	recs, next, err := h.store.Aborts().ListAborts(ctx, f)
	if p, ok := problemFor(err, subject{}); ok && p.Status == http.StatusBadRequest {
		return asBadRequest[api.ListAborts400ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("list aborts: %w", err)
	}
	out := api.AbortList{Aborts: make([]api.AbortRecord, len(recs))}
	for i, r := range recs {
		out.Aborts[i] = api.AbortRecord{Kind: api.AbortRecordKind(r.Kind), Project: r.Project, Domain: r.Domain,
			Run: r.RunName, Action: r.ActionName, AttemptId: r.AttemptID, Cause: r.Cause, Reason: r.Reason,
			RequestedAt: r.RequestedAt, AttemptCount: r.AttemptCount, Outcome: r.Outcome, UpdatedAt: r.UpdatedAt}
	}
	if next != "" {
		out.NextCursor = &next
	}
	return api.ListAborts200JSONResponse(out), nil
}
