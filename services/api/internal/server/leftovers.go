package server

import (
	"context"
	"fmt"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerapi"
)

// ExistingRuns answers which of the runs an executor's sweep names (its
// run directories) exist (store.Runs.ExistingRuns); the validator bounds
// the list and checks each name.
func (h *Handlers) ExistingRuns(ctx context.Context, req workerapi.ExistingRunsRequestObject) (workerapi.ExistingRunsResponseObject, error) {
	keys := make([]domain.RunKey, len(req.Body.Runs))
	for i, r := range req.Body.Runs {
		keys[i] = domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Run}
	}
	found, err := h.store.Runs().ExistingRuns(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("read %d runs of worker %s's sweep: %w", len(keys), req.Id, err)
	}
	out := workerapi.ExistingRuns200JSONResponse{Runs: make([]workerapi.RunRef, len(found))}
	for i, k := range found {
		out.Runs[i] = workerapi.RunRef{Project: k.Project, Domain: k.Domain, Run: k.Run}
	}
	return out, nil
}

// LiveAttempts answers which of the attempts an executor's sweep names
// (its work directories) are live (store.Attempts.LiveAttempts), of any
// worker: executors may share a data directory.
func (h *Handlers) LiveAttempts(ctx context.Context, req workerapi.LiveAttemptsRequestObject) (workerapi.LiveAttemptsResponseObject, error) {
	live, err := h.store.Attempts().LiveAttempts(ctx, req.Body.Attempts)
	if err != nil {
		return nil, fmt.Errorf("read %d attempts of worker %s's sweep: %w", len(req.Body.Attempts), req.Id, err)
	}
	return workerapi.LiveAttempts200JSONResponse{Attempts: append([]int64{}, live...)}, nil
}
