package plugin

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"time"
)

// LiveFunc answers which of ids are of live attempts, of any executor (the
// api's POST /v1/workers/{id}/attempts/live).
type LiveFunc func(ctx context.Context, ids []int64) (map[int64]bool, error)

// AdoptFunc takes back those of ids that this executor's previous identity
// left live (the api's POST /v1/workers/{id}/attempts/adopt) and starts
// them here; it returns those it took.
type AdoptFunc func(ctx context.Context, ids []int64) (map[int64]bool, error)

// SweepOrphans first re-adopts (adopt, when not nil) the attempts of the
// plugin's Pods that this executor's previous identity left running (a
// restart after a kill -9), then deletes the plugin's Pods, in the
// namespaces its informers watch (its default namespace and those of the
// attempts it ran), whose attempts are no longer live (an executor killed
// before it finalized them, an attempt that ended while its executor was
// down), but never one of an attempt held here (held). It removes their Finalizer too: the attempt's
// final state is recorded already. Any number of executors may sweep at
// once: what one deletes, the others find deleted. It returns how many it
// removed. Errors: the API server's or live's (what was removed is
// counted).
func (k *Kubernetes) SweepOrphans(ctx context.Context, adopt AdoptFunc, live LiveFunc, held func(id int64) bool) (int, error) {
	k.watches.ensure(k.cfg.Namespace)
	type podRef struct{ ns, name string }
	byID := map[int64][]podRef{}
	var ids []int64
	var errs []error
	for _, ns := range k.watches.namespaces() {
		pods, err := k.watches.list(ns)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range pods {
			id, err := strconv.ParseInt(p.Labels[LabelAttempt], 10, 64)
			if err != nil || id <= 0 || held(id) {
				continue
			}
			if byID[id] == nil {
				ids = append(ids, id)
			}
			byID[id] = append(byID[id], podRef{p.Namespace, p.Name})
		}
	}
	if len(ids) == 0 {
		return 0, errors.Join(errs...)
	}
	if adopt != nil {
		adopted, err := adopt(ctx, ids)
		if err != nil {
			errs = append(errs, err)
		}
		ids = slices.DeleteFunc(ids, func(id int64) bool { return adopted[id] })
	}
	if len(ids) == 0 {
		return 0, errors.Join(errs...)
	}
	alive, err := live(ctx, ids)
	if err != nil {
		return 0, errors.Join(append(errs, err)...)
	}
	removed := 0
	for _, id := range ids {
		if alive[id] || held(id) {
			continue
		}
		for _, p := range byID[id] {
			if err := RemovePod(ctx, k.cfg.Client, p.ns, p.name, 0); err != nil {
				errs = append(errs, err)
				continue
			}
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// RunSweep re-adopts and sweeps orphan Pods (SweepOrphans) at once and then every
// interval (default DefaultPodSweep) until ctx ends; a failed sweep is
// logged and tried again at the next.
func (k *Kubernetes) RunSweep(ctx context.Context, interval time.Duration, adopt AdoptFunc, live LiveFunc, held func(int64) bool,
	log *slog.Logger) {
	if interval <= 0 {
		interval = DefaultPodSweep
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := k.SweepOrphans(ctx, adopt, live, held)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("sweep of orphan Pods failed; tried again later", "removed", n, "err", err)
		case n > 0:
			log.Info("orphan Pods removed", "removed", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
