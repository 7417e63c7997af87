package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
)

// AbortRun aborts a run's root action a0 and everything under it.
func (h *Handlers) AbortRun(ctx context.Context, req api.AbortRunRequestObject) (api.AbortRunResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}.Action(domain.RootActionName)
	err := h.abort(ctx, key, req.Body)
	p, ok := problemFor(err, subject{kind: "action", name: key.String()})
	switch {
	case ok && p.Status == http.StatusNotFound:
		return asNotFound[api.AbortRun404ApplicationProblemPlusJSONResponse](p), nil
	case ok && p.Status == http.StatusConflict:
		return asConflict[api.AbortRun409ApplicationProblemPlusJSONResponse](p), nil
	case err != nil:
		return nil, err
	}
	d, err := h.store.Actions().GetAction(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read action %s: %w", key, err)
	}
	return api.AbortRun202JSONResponse(toAction(d)), nil
}

// AbortAction aborts one action and its descendants.
func (h *Handlers) AbortAction(ctx context.Context, req api.AbortActionRequestObject) (api.AbortActionResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}.Action(req.Action)
	err := h.abort(ctx, key, req.Body)
	p, ok := problemFor(err, subject{kind: "action", name: key.String()})
	switch {
	case ok && p.Status == http.StatusNotFound:
		return asNotFound[api.AbortAction404ApplicationProblemPlusJSONResponse](p), nil
	case ok && p.Status == http.StatusConflict:
		return asConflict[api.AbortAction409ApplicationProblemPlusJSONResponse](p), nil
	case err != nil:
		return nil, err
	}
	d, err := h.store.Actions().GetAction(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read action %s: %w", key, err)
	}
	return api.AbortAction202JSONResponse(toAction(d)), nil
}

// abort records the abort in Postgres, then pushes it to the reconciler
// (Flyte's AbortRun: persist first, then push). A failed push is
// healed by the reconciler's startup and periodic scans. Errors: the store's
// AbortAction's (ErrNotFound, ErrTerminal), wrapped with the action's key.
func (h *Handlers) abort(ctx context.Context, key domain.ActionKey, body *api.AbortRequest) error {
	reason := domain.DefaultAbortReason
	if body != nil && body.Reason != nil && *body.Reason != "" {
		reason = *body.Reason
	}
	if _, err := h.store.Aborts().AbortAction(ctx, key, reason, store.CauseAborted); err != nil {
		return fmt.Errorf("record abort of action %s: %w", key, err)
	}
	if err := h.queue.Enqueue(ctx, queue.NewActionAbortTask(key, queue.AbortTaskRetries(h.cfg.AbortMaxAttempts))); err != nil {
		h.log.Warn("enqueue abort failed; the reconciler's scan will deliver it", "key", key.String(), "err", err)
	}
	if key.Action != domain.RootActionName {
		if err := h.queue.Enqueue(ctx, queue.NewRunAdvanceTask(key.RunKey)); err != nil {
			h.log.Warn("enqueue run advance failed", "run", key.RunKey.String(), "err", err)
		}
	}
	return nil
}
