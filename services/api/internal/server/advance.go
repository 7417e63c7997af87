package server

import (
	"context"
	"fmt"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
)

// advance asks the scheduler to act on what a handler just recorded about
// the run (a suspend, a resume, a decision, a restart) by pushing
// run:advance. A failed push is logged and healed by the scheduler's resync:
// it advances the unfinished runs (store.UnfinishedRuns) and the ended runs
// whose restart waits (store.RestartRequestedRuns).
func (h *Handlers) advance(ctx context.Context, key domain.RunKey) {
	if err := h.queue.Enqueue(ctx, queue.NewRunAdvanceTask(key)); err != nil {
		h.log.Warn("enqueue run advance failed; the scheduler's resync will advance it", "run", key.String(), "err", err)
	}
}

// advancedRun pushes the run's advance and returns the run as it now reads,
// the answer of a run's control routes.
func (h *Handlers) advancedRun(ctx context.Context, key domain.RunKey) (api.Run, error) {
	h.advance(ctx, key)
	d, err := h.store.Runs().GetRun(ctx, key)
	if err != nil {
		return api.Run{}, fmt.Errorf("read run %s: %w", key, err)
	}
	outs, err := h.runOutputs(ctx, d)
	if err != nil {
		return api.Run{}, err
	}
	return toRun(d, outs), nil
}
