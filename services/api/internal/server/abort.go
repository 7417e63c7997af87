package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
)

// AbortRun aborts a run's root action a0 and everything under it.
func (h *Handlers) AbortRun(ctx context.Context, req api.AbortRunRequestObject) (api.AbortRunResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}.Action(domain.RootActionName)
	a, p, err := h.abort(ctx, key, req.Body)
	switch {
	case err != nil:
		return nil, err
	case p != nil && p.Status == http.StatusNotFound:
		return api.AbortRun404ApplicationProblemPlusJSONResponse{ProblemApplicationProblemPlusJSONResponse: api.ProblemApplicationProblemPlusJSONResponse(*p)}, nil
	case p != nil:
		return api.AbortRun409ApplicationProblemPlusJSONResponse(*p), nil
	}
	return api.AbortRun202JSONResponse(a), nil
}

// AbortAction aborts one action and its descendants.
func (h *Handlers) AbortAction(ctx context.Context, req api.AbortActionRequestObject) (api.AbortActionResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}.Action(req.Action)
	a, p, err := h.abort(ctx, key, req.Body)
	switch {
	case err != nil:
		return nil, err
	case p != nil && p.Status == http.StatusNotFound:
		return api.AbortAction404ApplicationProblemPlusJSONResponse{ProblemApplicationProblemPlusJSONResponse: api.ProblemApplicationProblemPlusJSONResponse(*p)}, nil
	case p != nil:
		return api.AbortAction409ApplicationProblemPlusJSONResponse(*p), nil
	}
	return api.AbortAction202JSONResponse(a), nil
}

// abort records the abort in Postgres, then pushes it to the reconciler
// (Flyte's AbortRun: persist first, then push; seeds/000). A failed push is
// healed by the reconciler's startup and periodic scans.
func (h *Handlers) abort(ctx context.Context, key domain.ActionKey, body *api.AbortRequest) (api.Action, *api.Problem, error) {
	reason := domain.DefaultAbortReason
	if body != nil && body.Reason != nil && *body.Reason != "" {
		reason = *body.Reason
	}
	_, err := h.store.AbortAction(ctx, key, reason, store.CauseAborted)
	if errors.Is(err, store.ErrNotFound) {
		p := apiProblem(http.StatusNotFound, problem.CodeNotFound, "action "+key.String()+" not found")
		return api.Action{}, &p, nil
	}
	if errors.Is(err, store.ErrTerminal) {
		p := apiProblem(http.StatusConflict, problem.CodeTerminal, "action "+key.String()+" has already ended; nothing to abort")
		return api.Action{}, &p, nil
	}
	if err != nil {
		return api.Action{}, nil, err
	}
	if err := h.queue.Enqueue(ctx, queue.NewActionAbortTask(key, h.cfg.AbortMaxAttempts+5)); err != nil {
		h.log.Warn("enqueue abort failed; the reconciler's scan will deliver it", "key", key.String(), "err", err)
	}
	if key.Action != domain.RootActionName {
		if err := h.queue.Enqueue(ctx, queue.NewRunAdvanceTask(key.RunKey)); err != nil {
			h.log.Warn("enqueue run advance failed", "run", key.RunKey.String(), "err", err)
		}
	}
	d, err := h.store.GetAction(ctx, key)
	if err != nil {
		return api.Action{}, nil, err
	}
	return toAction(d), nil, nil
}
