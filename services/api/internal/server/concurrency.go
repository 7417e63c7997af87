package server

import (
	"context"
	"fmt"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// GetConcurrency returns the slot ledger of a project and domain: each
// run-level concurrency key a run holds or waits for (store.ConcurrencyLedger),
// with its holders and its first waiters in line, then each step
// concurrency key with an unfinished task (store.Placement.TaskSlots),
// with its holder tasks and how many wait.
func (h *Handlers) GetConcurrency(ctx context.Context, req api.GetConcurrencyRequestObject) (api.GetConcurrencyResponseObject, error) {
	keys, err := h.store.Runs().ConcurrencyLedger(ctx, req.Project, req.Domain)
	if err != nil {
		return nil, fmt.Errorf("read the concurrency ledger of %s/%s: %w", req.Project, req.Domain, err)
	}
	tasks, err := h.store.Placement().TaskSlots(ctx, req.Project, req.Domain)
	if err != nil {
		return nil, fmt.Errorf("read the step concurrency ledger of %s/%s: %w", req.Project, req.Domain, err)
	}
	out := api.ConcurrencyLedger{Keys: make([]api.ConcurrencyKey, 0, len(keys)+len(tasks))}
	for _, k := range keys {
		out.Keys = append(out.Keys, toLedgerKey(k))
	}
	for _, k := range tasks {
		out.Keys = append(out.Keys, toTaskSlotKey(k))
	}
	return api.GetConcurrency200JSONResponse(out), nil
}

// toTaskSlotKey is a step concurrency key of the ledger as the API shows
// it: its holder tasks; its waiting tasks are counted, not listed.
func toTaskSlotKey(k store.TaskSlot) api.ConcurrencyKey {
	out := api.ConcurrencyKey{Kind: api.ConcurrencyKeyKindTask, Key: k.Key, Max: k.Max, Waiting: k.Waiting,
		Holders: make([]api.ConcurrencySlot, len(k.Holders)), Waiters: []api.ConcurrencySlot{}}
	for i, h := range k.Holders {
		out.Holders[i] = api.ConcurrencySlot{Run: h.Run, Action: ptrTo(h.Action), Task: ptrTo(h.Task),
			State: ptrTo(taskState(h.State))}
	}
	return out
}

// toLedgerKey is a run-level key of the ledger as the API shows it.
func toLedgerKey(k store.LedgerKey) api.ConcurrencyKey {
	out := api.ConcurrencyKey{Kind: api.ConcurrencyKeyKindRun, Key: k.Key, Max: k.MaxRuns, Waiting: k.Waiting,
		Holders: make([]api.ConcurrencySlot, len(k.Holders)), Waiters: make([]api.ConcurrencySlot, len(k.Waiters))}
	for i, r := range k.Holders {
		since := r.CreatedAt
		if r.AdmittedAt != nil {
			since = *r.AdmittedAt
		}
		out.Holders[i] = api.ConcurrencySlot{Run: r.Run, Phase: ptrTo(api.Phase(r.Phase)), Since: &since,
			Stopping: ptrTo(r.Stopping)}
	}
	for i, r := range k.Waiters {
		out.Waiters[i] = api.ConcurrencySlot{Run: r.Run, Phase: ptrTo(api.Phase(r.Phase)), Since: ptrTo(r.CreatedAt),
			Place: ptrTo(r.Place)}
	}
	return out
}

// livePendingReason is the pending_reason of a run as it is now: a run
// waiting for a slot of its concurrency key gets its current place in line
// (store.LinePlace); any other run keeps its own.
func (h *Handlers) livePendingReason(ctx context.Context, run store.Run) (*string, error) {
	place, err := h.store.Runs().LinePlace(ctx, run)
	if err != nil || place == 0 || run.Spec.Concurrency == nil {
		return run.PendingReason, err
	}
	reason := domain.WaitReason(*run.ConcurrencyKey, place, run.Spec.Concurrency.MaxRuns)
	return &reason, nil
}

func ptrTo[T any](v T) *T { return &v }
