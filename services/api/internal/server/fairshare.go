package server

import (
	"context"
	"fmt"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
)

// GetFairShare returns a project's fair-share weight, 1 until set (any
// reader of the project).
func (h *Handlers) GetFairShare(ctx context.Context, req api.GetFairShareRequestObject) (api.GetFairShareResponseObject, error) {
	w, err := h.store.Placement().FairWeight(ctx, req.Project)
	if err != nil {
		return nil, fmt.Errorf("read fair-share weight of %s: %w", req.Project, err)
	}
	return api.GetFairShare200JSONResponse{Weight: w}, nil
}

// SetFairShare sets a project's fair-share weight (admin, by the spec's
// x-capstan-role); 422 naming weight when it is not within
// domain.MinFairWeight..MaxFairWeight.
func (h *Handlers) SetFairShare(ctx context.Context, req api.SetFairShareRequestObject) (api.SetFairShareResponseObject, error) {
	w := req.Body.Weight
	if !domain.ValidFairWeight(w) {
		return asUnprocessable[api.SetFairShare422ApplicationProblemPlusJSONResponse](invalidProblem([]domain.FieldError{{Field: "weight",
			Message: fmt.Sprintf("must be between %d and %d, got %d", domain.MinFairWeight, domain.MaxFairWeight, w)}})), nil
	}
	if err := h.store.Placement().SetFairWeight(ctx, req.Project, w); err != nil {
		return nil, fmt.Errorf("set fair-share weight of %s: %w", req.Project, err)
	}
	h.log.Info("fair-share weight set", "project", req.Project, "weight", w)
	return api.SetFairShare200JSONResponse{Weight: w}, nil
}
