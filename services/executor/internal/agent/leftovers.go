package agent

import (
	"context"
	"fmt"
	"slices"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/google/uuid"
)

// maxAsk is the most runs, or attempts, one question of the sweep names
// (the api takes 1,000).
const maxAsk = 1000

// ExistingRuns returns which of keys are runs, asking the api (POST
// /v1/workers/{id}/runs/existing) maxAsk keys a request. Errors:
// StatusError (ErrRejected for a 4xx), transport errors.
func (c *Client) ExistingRuns(ctx context.Context, worker uuid.UUID, keys []domain.RunKey) (map[domain.RunKey]bool, error) {
	found := make(map[domain.RunKey]bool)
	for page := range slices.Chunk(keys, maxAsk) {
		body := workerapi.ExistingRunsRequest{Runs: make([]workerapi.RunRef, len(page))}
		for i, k := range page {
			body.Runs[i] = workerapi.RunRef{Project: k.Project, Domain: k.Domain, Run: k.Run}
		}
		res, err := c.api.ExistingRunsWithResponse(ctx, worker, body)
		if err != nil {
			return nil, fmt.Errorf("existing runs: %w", err)
		}
		if res.JSON200 == nil {
			return nil, &StatusError{"existing runs", res.StatusCode(), string(res.Body)}
		}
		for _, r := range res.JSON200.Runs {
			found[domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Run}] = true
		}
	}
	return found, nil
}

// LiveAttempts returns which of ids are of live attempts, of any worker,
// asking the api (POST /v1/workers/{id}/attempts/live) maxAsk ids a
// request. Errors: as ExistingRuns'.
func (c *Client) LiveAttempts(ctx context.Context, worker uuid.UUID, ids []int64) (map[int64]bool, error) {
	live := make(map[int64]bool)
	for page := range slices.Chunk(ids, maxAsk) {
		res, err := c.api.LiveAttemptsWithResponse(ctx, worker, workerapi.LiveAttemptsRequest{Attempts: page})
		if err != nil {
			return nil, fmt.Errorf("live attempts: %w", err)
		}
		if res.JSON200 == nil {
			return nil, &StatusError{"live attempts", res.StatusCode(), string(res.Body)}
		}
		for _, id := range res.JSON200.Attempts {
			live[id] = true
		}
	}
	return live, nil
}
