package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
)

// ResumeRun records a resume of a run (it ends a suspend, resumes the suspend
// steps without a duration and retries a step paused by on_failure suspend)
// and of every
// live descendant run (its workflow steps' children), and pushes their
// advances. 409 already_terminal once the run has ended.
func (h *Handlers) ResumeRun(ctx context.Context, req api.ResumeRunRequestObject) (api.ResumeRunResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}
	_, descendants, err := h.store.Runs().RequestResume(ctx, key)
	p, ok := problemFor(err, subject{kind: "run", name: key.String(), op: "resume"})
	switch {
	case ok && p.Status == http.StatusNotFound:
		return asNotFound[api.ResumeRun404ApplicationProblemPlusJSONResponse](p), nil
	case ok && p.Status == http.StatusConflict:
		return asConflict[api.ResumeRun409ApplicationProblemPlusJSONResponse](p), nil
	case err != nil:
		return nil, fmt.Errorf("request resume of run %s: %w", key, err)
	}
	for _, d := range descendants { // its child runs', theirs…
		h.advance(ctx, d)
	}
	run, err := h.advancedRun(ctx, key)
	if err != nil {
		return nil, err
	}
	return api.ResumeRun202JSONResponse(run), nil
}
