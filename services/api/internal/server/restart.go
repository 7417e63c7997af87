package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
)

// RestartRun records a restart of a run that ended in failure, from the
// body's from_step (default: every step that did not succeed), and pushes
// its advance; the scheduler re-runs the steps. 409 not_restartable or
// abort_pending, 422 for a from_step that names no step.
func (h *Handlers) RestartRun(ctx context.Context, req api.RestartRunRequestObject) (api.RestartRunResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}
	var from string
	if req.Body != nil && req.Body.FromStep != nil {
		from = *req.Body.FromStep
	}
	_, err := h.store.Runs().RequestRestart(ctx, key, from)
	p, ok := problemFor(err, subject{kind: "run", name: key.String()})
	switch {
	case ok && p.Status == http.StatusNotFound:
		return asNotFound[api.RestartRun404ApplicationProblemPlusJSONResponse](p), nil
	case ok && p.Status == http.StatusConflict:
		return asConflict[api.RestartRun409ApplicationProblemPlusJSONResponse](p), nil
	case ok && p.Status == http.StatusUnprocessableEntity:
		return asUnprocessable[api.RestartRun422ApplicationProblemPlusJSONResponse](p), nil
	case err != nil:
		return nil, fmt.Errorf("request restart of run %s: %w", key, err)
	}
	run, err := h.advancedRun(ctx, key)
	if err != nil {
		return nil, err
	}
	return api.RestartRun202JSONResponse(run), nil
}
