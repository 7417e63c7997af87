package scheduler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// taskAdmission is a pass's view of the admission of the tasks it read
// that have admission fields (store.Task.HasAdmission): the live count of
// their concurrency keys and their rate limits' buckets, read once
// (store.Placement.AdmissionState) under the placement lock, then kept
// up to date with what the pass itself places. It decides per unit
// (check) with the pure rules, domain.SlotFree and domain.TokenRate.Take.
type taskAdmission struct {
	st store.TaskAdmissionState
	// held counts the live tasks of each key, with the pass's placements.
	held map[store.SlotKey]int
	// buckets holds the buckets the pass took from, as of st.Now.
	buckets map[store.BucketKey]domain.Bucket
	// placed are the admission tasks placed, by id, for spent.
	placed map[int64]store.Task
	// dueAt is the earliest time a task left waiting for tokens has them.
	dueAt time.Time
}

// readAdmission reads the admission state of tasks when any of them has
// admission fields, in one statement; a pass whose tasks have none reads
// nothing more.
func (p *placement) readAdmission(ctx context.Context, tasks []store.Task) error {
	if !slices.ContainsFunc(tasks, store.Task.HasAdmission) {
		return nil
	}
	st, err := p.st.Placement().AdmissionState(ctx, tasks)
	if err != nil {
		return fmt.Errorf("read admission state: %w", err)
	}
	p.adm = &taskAdmission{st: st, held: st.Held, buckets: map[store.BucketKey]domain.Bucket{},
		placed: map[int64]store.Task{}}
	return nil
}

// bucket returns k's bucket as of the pass's clock, refilled at rate: as
// the pass left it, else as read, else full (never taken from).
func (a *taskAdmission) bucket(k store.BucketKey, rate domain.TokenRate) domain.Bucket {
	if b, ok := a.buckets[k]; ok {
		return b
	}
	b, ok := a.st.Buckets[k]
	if !ok {
		return rate.FullBucket(a.st.Now)
	}
	return rate.Refill(b, a.st.Now)
}

// check returns "" when every task of unit (a gang's together) may be
// placed now, else the pending_reason of the first that may not: its
// concurrency key's slots are all held (domain.SlotFree), or a bucket it
// takes does not hold its units (recording when they are due), or its
// rate limit is not defined. It changes nothing.
func (a *taskAdmission) check(unit []store.Task) string {
	slots := map[store.SlotKey]int{}
	tokens := map[store.BucketKey]int{}
	for _, t := range unit {
		if t.ConcurrencyKey != nil && t.ConcurrencyMax != nil {
			k := store.SlotKey{Project: t.Project, Domain: t.Domain, Key: *t.ConcurrencyKey}
			if held := a.held[k] + slots[k]; !domain.SlotFree(held, *t.ConcurrencyMax) {
				return domain.SlotWaitReason(k.Key, a.held[k], *t.ConcurrencyMax)
			}
			slots[k]++
		}
		for _, r := range t.RateLimits {
			rate, ok := a.st.Rates[store.RateLimitKey{Project: t.Project, Name: r.Name}]
			if !ok {
				return domain.UndefinedRateLimitReason(r.Name)
			}
			k := store.BucketKey{Project: t.Project, Name: r.Name, Key: r.Key}
			tokens[k] += r.Units
			b := a.bucket(k, rate)
			if _, ok := rate.Take(b, tokens[k], a.st.Now); ok {
				continue
			}
			at, ok := rate.DueAt(b, tokens[k])
			if !ok {
				return domain.TokenNeverReason(r.Name, tokens[k], rate.Limit)
			}
			if a.dueAt.IsZero() || at.Before(a.dueAt) {
				a.dueAt = at
			}
			return domain.TokenWaitReason(r.Name, r.Key, r.Units)
		}
	}
	return ""
}

// take records unit placed: its tasks hold their slots and their tokens
// are gone, for the units the pass decides after it.
func (a *taskAdmission) take(unit []store.Task) {
	for _, t := range unit {
		if !t.HasAdmission() {
			continue
		}
		a.placed[t.ID] = t
		if t.ConcurrencyKey != nil {
			a.held[store.SlotKey{Project: t.Project, Domain: t.Domain, Key: *t.ConcurrencyKey}]++
		}
		for _, r := range t.RateLimits {
			k := store.BucketKey{Project: t.Project, Name: r.Name, Key: r.Key}
			rate := a.st.Rates[store.RateLimitKey{Project: t.Project, Name: r.Name}]
			a.buckets[k], _ = rate.Take(a.bucket(k, rate), r.Units, a.st.Now)
		}
	}
}

// spent returns the buckets the bound attempts' tasks took from, each as
// read and refilled to the pass's clock, less the units of the tasks bound
// (a task placed but not bound, no longer PENDING, takes nothing).
func (a *taskAdmission) spent(bound []store.Assigned) []store.BucketTokens {
	units := map[store.BucketKey]int{}
	var order []store.BucketKey
	for _, at := range bound {
		for _, r := range a.placed[at.TaskID].RateLimits {
			k := store.BucketKey{Project: at.Project, Name: r.Name, Key: r.Key}
			if _, ok := units[k]; !ok {
				order = append(order, k)
			}
			units[k] += r.Units
		}
	}
	out := make([]store.BucketTokens, 0, len(order))
	for _, k := range order {
		rate := a.st.Rates[store.RateLimitKey{Project: k.Project, Name: k.Name}]
		b, ok := a.st.Buckets[k]
		if !ok {
			b = rate.FullBucket(a.st.Now)
		}
		b = rate.Refill(b, a.st.Now)
		out = append(out, store.BucketTokens{BucketKey: k, Tokens: max(b.Tokens-float64(units[k]), 0)})
	}
	return out
}

// hasAdmission reports whether a unit's placement is limited by a step
// concurrency or a rate limit.
func hasAdmission(unit []store.Task) bool { return slices.ContainsFunc(unit, store.Task.HasAdmission) }
