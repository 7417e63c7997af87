package server

import (
	"context"
	"fmt"

	"github.com/capstan-run/capstan/pkg/workerapi"
)

// AdoptAttempts moves to the calling worker the attempts it names that its
// previous identity (a worker of its name) left live
// (store.Attempts.AdoptAttempts).
func (h *Handlers) AdoptAttempts(ctx context.Context, req workerapi.AdoptAttemptsRequestObject) (workerapi.AdoptAttemptsResponseObject, error) {
	moved, err := h.store.Attempts().AdoptAttempts(ctx, req.Id.String(), req.Body.Attempts)
	if err != nil {
		return nil, fmt.Errorf("adopt %d attempts for worker %s: %w", len(req.Body.Attempts), req.Id, err)
	}
	return workerapi.AdoptAttempts200JSONResponse{Attempts: append([]int64{}, moved...)}, nil
}
