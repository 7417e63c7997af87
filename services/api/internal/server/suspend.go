package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
)

// SuspendRun records a suspend of a run (no new step starts; the scheduler
// makes the run PAUSED once nothing runs) and of every
// live descendant run (its workflow steps' children), and pushes their
// advances. 409
// already_terminal once the run has ended.
func (h *Handlers) SuspendRun(ctx context.Context, req api.SuspendRunRequestObject) (api.SuspendRunResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}
	_, descendants, err := h.store.Runs().RequestSuspend(ctx, key)
	p, ok := problemFor(err, subject{kind: "run", name: key.String(), op: "suspend"})
	switch {
	case ok && p.Status == http.StatusNotFound:
		return asNotFound[api.SuspendRun404ApplicationProblemPlusJSONResponse](p), nil
	case ok && p.Status == http.StatusConflict:
		return asConflict[api.SuspendRun409ApplicationProblemPlusJSONResponse](p), nil
	case err != nil:
		return nil, fmt.Errorf("request suspend of run %s: %w", key, err)
	}
	for _, d := range descendants { // its child runs', theirs…
		h.advance(ctx, d)
	}
	run, err := h.advancedRun(ctx, key)
	if err != nil {
		return nil, err
	}
	return api.SuspendRun202JSONResponse(run), nil
}
