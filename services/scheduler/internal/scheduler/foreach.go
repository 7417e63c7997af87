package scheduler

import (
	"context"
	"fmt"
	"maps"

	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// Dynamic fan-out (Argo's withParam, Flyte's map tasks): a for_each step
// starts one task per item of a list known only when it starts: the list
// its spec gives, or the JSON array an earlier step wrote as an output.

// startForEach starts for_each step a of run: its tasks (forEachTasks)
// are created, and the step ends at once (ended true) when none of them
// has to run: SUCCEEDED over no item, or when every item succeeded
// already (an earlier generation's success, or its cache entry); FAILED,
// with the reason, when its list is not a JSON array of at most
// domain.MaxForEachItems items.
func (s *Scheduler) startForEach(ctx context.Context, tx *store.Store, run store.Run, a store.Action,
	now time.Time) (ended bool, err error) {
	key := runKeyOf(run)
	ak, from := key.Action(a.Name), domain.Phase(a.Phase)
	rows, reason, err := s.forEachTasks(ctx, tx, run, a, now)
	if err != nil {
		return false, err
	}
	if reason != "" {
		return true, tx.Actions().EndAtStart(ctx, ak, from, domain.PhaseFailed, reason, nil, now)
	}
	if len(rows) > 0 {
		if err := tx.Tasks().CreateTasks(ctx, key, now, store.StartedStep{Action: a.Name, Tasks: rows}); err != nil {
			return false, fmt.Errorf("create %d tasks: %w", len(rows), err)
		}
	}
	if pendingRows(rows) > 0 {
		return false, nil
	}
	return true, tx.Actions().EndAtStart(ctx, ak, from, domain.PhaseSucceeded, "", nil, now)
}

// pendingRows counts the rows that have to run (PENDING).
func pendingRows(rows []store.Task) int {
	n := 0
	for _, r := range rows {
		if r.State == domain.TaskPending {
			n++
		}
	}
	return n
}

// forEachTasks returns the tasks of for_each step a's generation, one per
// item in index order, each with its item and its step's admission (a
// max_parallel is a step concurrency key of the step's generation alone,
// domain.ForEachSlotKey). A task whose item (same index, same value)
// SUCCEEDED in the step's previous generation is created SUCCEEDED with
// those outputs: a restart or a retry reruns only the failed items. A
// cached step looks each other item up by its own key (the step's inputs
// and the item): a valid entry makes the task SUCCEEDED with its outputs.
// reason is set, and no task returned, when the list is not one.
func (s *Scheduler) forEachTasks(ctx context.Context, tx *store.Store, run store.Run, a store.Action,
	now time.Time) (rows []store.Task, reason string, err error) {
	ak := runKeyOf(run).Action(a.Name)
	items, reason, err := forEachItems(ctx, tx, run, a)
	if err != nil || reason != "" {
		return nil, reason, err
	}
	values := domain.ItemValues(items)
	rows = store.NewTaskRows(ak, a.Generation, domain.ForEachTasks(a.Spec, values, *s.cfg.MaxSystemFailures, now))
	if a.Spec.HasAdmission() {
		adm, errs := a.Spec.ItemAdmissions(run.Params, items, "step")
		if len(errs) > 0 {
			s.log.Warn("task admission key failed", "action", ak.String(), "err", errs[0].Error())
		}
		rows = store.WithAdmission(rows, adm)
	}
	if p := a.Spec.ForEach.MaxParallel; p != nil {
		k := domain.ForEachSlotKey(run.Name, a.Name, a.Generation)
		for i := range rows {
			rows[i].ConcurrencyKey, rows[i].ConcurrencyMax = &k, p
		}
	}
	if a.Generation > 0 {
		prev, err := tx.Tasks().SucceededItems(ctx, ak, a.Generation-1)
		if err != nil {
			return nil, "", fmt.Errorf("read items generation %d succeeded at: %w", a.Generation-1, err)
		}
		for _, p := range prev {
			if p.Idx < len(rows) && p.Item != nil && *p.Item == values[p.Idx] {
				succeeded(&rows[p.Idx], p.Outputs, now)
			}
		}
	}
	if a.Spec.Cache != nil {
		if err := s.itemsFromCache(ctx, tx, a, rows, now); err != nil {
			return nil, "", err
		}
	}
	return rows, "", nil
}

// forEachItems returns for_each step a's list: its run's spec's items, or
// the value of its from output parsed by domain.ForEachItems; reason says
// why there is none (the producer has no such output, or its value is not
// a list).
func forEachItems(ctx context.Context, tx *store.Store, run store.Run, a store.Action) (items []any, reason string,
	err error) {
	f := a.Spec.ForEach
	if f.From == "" {
		return run.Spec.StaticItems(a.Name), "", nil
	}
	step, output := f.Producer()
	outs, err := tx.Actions().StepOutputs(ctx, runKeyOf(run), []string{step})
	if err != nil {
		return nil, "", fmt.Errorf("read outputs of %s: %w", step, err)
	}
	raw, ok := outs[step][output]
	if !ok {
		return nil, fmt.Sprintf("for_each.from %s: step %q has no output %q (it did not succeed)", f.From, step, output), nil
	}
	if items, err = domain.ForEachItems(raw); err != nil {
		return nil, fmt.Sprintf("for_each.from %s %s", f.From, err), nil
	}
	return items, "", nil
}

// succeeded makes row a task that SUCCEEDED without running, with outputs.
func succeeded(row *store.Task, outputs map[string]string, now time.Time) {
	row.State, row.Outputs, row.EndedAt = domain.TaskSucceeded, maps.Clone(outputs), &now
	if row.Outputs == nil {
		row.Outputs = map[string]string{} // set: it did not run
	}
	row.ConcurrencyKey, row.ConcurrencyMax, row.RateLimits = nil, nil, nil
}

// itemCacheKeys returns the cache key of each item of for_each step a
// (domain.CacheKey over the step's resolved inputs and the item as the
// input named for_each.as), by index; items[i] nil is skipped ("").
func itemCacheKeys(ctx context.Context, tx *store.Store, a store.Action, items []*string) ([]string, error) {
	key := keyOf(a)
	outs, err := tx.Actions().StepOutputs(ctx, key.RunKey, domain.InputProducers(a.Spec.Inputs))
	if err != nil {
		return nil, fmt.Errorf("read input outputs: %w", err)
	}
	inputs := domain.ResolveInputs(a.Spec.Inputs, outs)
	as := a.Spec.ForEach.EnvName()
	keys := make([]string, len(items))
	for i, it := range items {
		if it == nil {
			continue
		}
		in := make(map[string]string, len(inputs)+1)
		maps.Copy(in, inputs)
		in[as] = *it
		keys[i] = domain.CacheKey(key.Project, key.Domain, a.Spec, in)
	}
	return keys, nil
}

// itemsFromCache looks up the cache entry of each PENDING row of cached
// for_each step a: a valid one (domain.CacheEntryValid with the step's
// max_age) makes the row SUCCEEDED with the entry's outputs. The step's
// cache status becomes HIT when every item hit, else MISS (the items that
// run write their entries when the step ends, finalizeItemsCache).
func (s *Scheduler) itemsFromCache(ctx context.Context, tx *store.Store, a store.Action, rows []store.Task,
	now time.Time) error {
	items := make([]*string, len(rows))
	for i, r := range rows {
		if r.State == domain.TaskPending {
			items[i] = r.Item
		}
	}
	keys, err := itemCacheKeys(ctx, tx, a, items)
	if err != nil {
		return err
	}
	ak := keyOf(a)
	var lookup []string
	for _, k := range keys {
		if k != "" {
			lookup = append(lookup, k)
		}
	}
	entries := map[string]store.CacheEntry{}
	if len(lookup) > 0 {
		if entries, err = tx.Cache().GetCacheEntries(ctx, ak.Project, ak.Domain, lookup); err != nil {
			return fmt.Errorf("read %d cache entries: %w", len(lookup), err)
		}
	}
	for i, k := range keys {
		if e, ok := entries[k]; ok && k != "" &&
			domain.CacheEntryValid(e.CreatedAt, e.ExpiresAt, a.Spec.Cache.MaxAgeDuration(), now) {
			succeeded(&rows[i], e.Outputs, now)
		}
	}
	status := domain.CacheMiss
	if pendingRows(rows) == 0 {
		status = domain.CacheHit
	}
	if err := tx.Cache().SetCacheStatus(ctx, ak, status, now); err != nil {
		return fmt.Errorf("set cache status of %s: %w", ak, err)
	}
	return nil
}

// finalizeItemsCache is finalizeCache for a cached for_each step act (MISS)
// that ended: each item that ran and SUCCEEDED writes its entry (by its
// key, itemCacheKeys; expiring after the step's max_age), in one
// statement, and the step's status becomes POPULATED.
func (s *Scheduler) finalizeItemsCache(ctx context.Context, tx *store.Store, act store.Action, now time.Time) error {
	ak := keyOf(act)
	done, err := tx.Tasks().SucceededItems(ctx, ak, act.Generation)
	if err != nil {
		return fmt.Errorf("read succeeded items of %s: %w", ak, err)
	}
	items := make([]*string, len(done))
	for i, d := range done {
		if d.Ran {
			items[i] = d.Item
		}
	}
	keys, err := itemCacheKeys(ctx, tx, act, items)
	if err != nil {
		return err
	}
	var expires *time.Time
	if d := act.Spec.Cache.MaxAgeDuration(); d > 0 {
		at := now.Add(d)
		expires = &at
	}
	var entries []store.CacheEntry
	for i, k := range keys {
		if k == "" {
			continue
		}
		entries = append(entries, store.CacheEntry{Project: act.Project, Domain: act.Domain, Key: k,
			Version: act.Spec.Cache.Version, RunName: act.RunName, ActionName: act.Name,
			Outputs: declaredOutputs(act.Spec.Outputs, done[i].Outputs), ExpiresAt: expires})
	}
	if err := tx.Cache().PutCacheEntries(ctx, entries, now); err != nil {
		return fmt.Errorf("put %d cache entries of %s: %w", len(entries), ak, err)
	}
	if err := tx.Cache().SetCacheStatus(ctx, ak, domain.CachePopulated, now); err != nil {
		return fmt.Errorf("mark cache of %s populated: %w", ak, err)
	}
	return nil
}

// declaredOutputs is an item's value of each declared output ("" for one
// it did not write).
func declaredOutputs(declared []string, got map[string]string) map[string]string {
	out := make(map[string]string, len(declared))
	for _, n := range declared {
		out[n] = got[n]
	}
	return out
}

// retryForEach creates the tasks of for_each step a's new generation (a
// retry: forEachTasks, so only the items that did not succeed run again);
// when none has to run, or its list is no longer one, the step ends as
// startForEach would end it.
func (s *Scheduler) retryForEach(ctx context.Context, tx *store.Store, run store.Run, a *store.Action,
	now time.Time) error {
	ak := keyOf(*a)
	rows, reason, err := s.forEachTasks(ctx, tx, run, *a, now)
	if err != nil {
		return err
	}
	to := domain.PhaseSucceeded
	if reason != "" {
		to = domain.PhaseFailed
	}
	if len(rows) > 0 {
		if err := tx.Tasks().InsertTasks(ctx, rows); err != nil {
			return fmt.Errorf("insert tasks of generation %d: %w", a.Generation, err)
		}
	}
	if pendingRows(rows) > 0 {
		return nil
	}
	if err := tx.Actions().EndWait(ctx, ak, domain.Phase(a.Phase), to, reason, now); err != nil {
		return fmt.Errorf("end %s without a task to run: %w", ak, err)
	}
	a.Phase = string(to)
	return nil
}
