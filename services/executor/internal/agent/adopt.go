package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/google/uuid"
)

// ErrNotRegistered: the worker has no identity yet.
var ErrNotRegistered = errors.New("not registered yet")

// AdoptAttempts asks the api (POST /v1/workers/{id}/attempts/adopt), maxAsk
// ids a request, to move to worker those of ids that a previous identity
// of its name left live, and returns those moved. Errors: as
// ExistingRuns'.
func (c *Client) AdoptAttempts(ctx context.Context, worker uuid.UUID, ids []int64) ([]int64, error) {
	var moved []int64
	for page := range slices.Chunk(ids, maxAsk) {
		res, err := c.api.AdoptAttemptsWithResponse(ctx, worker, workerapi.LiveAttemptsRequest{Attempts: page})
		if err != nil {
			return moved, fmt.Errorf("adopt attempts: %w", err)
		}
		if res.JSON200 == nil {
			return moved, &StatusError{"adopt attempts", res.StatusCode(), string(res.Body)}
		}
		moved = append(moved, res.JSON200.Attempts...)
	}
	return moved, nil
}

// Adopt takes back those of ids (attempts whose work outlived a previous
// identity of this executor: Pods) that the control plane moves to this
// worker, and starts each here as a read attempt (startAttempt), its
// plugin finding its work already there. It returns those it started.
// Errors: ErrNotRegistered, the api's, the starts' (joined).
func (a *Agent) Adopt(ctx context.Context, ids []int64) (map[int64]bool, error) {
	worker, err := uuid.Parse(a.WorkerID())
	if err != nil {
		return nil, ErrNotRegistered
	}
	moved, err := a.client.AdoptAttempts(ctx, worker, ids)
	started := make(map[int64]bool, len(moved))
	errs := make([]error, len(moved))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, id := range moved {
		wg.Go(func() {
			if errs[i] = a.startAttempt(ctx, worker, id, nil); errs[i] == nil {
				mu.Lock()
				started[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(moved) > 0 {
		a.log.Info("attempts adopted from a previous identity", "worker_id", worker, "adopted", len(started))
	}
	return started, errors.Join(append(errs, err)...)
}
