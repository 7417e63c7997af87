package scheduler

import (
	"context"
	"fmt"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// freshPlacement places a fresh run's tasks in the transaction that starts
// the run, on the leader: the run then costs no pass (its read, its bind
// in a transaction of its own, the kick that wakes it), and a task is
// ASSIGNED as it is created. It applies only when the pass would place
// those tasks next anyway: the replica leads, the start's lock statement
// got the placement lock (store.TryLockRuns: no pass or other start holds
// it), and no other task waits PENDING in the same band or a higher one
// (store.FreshWork). It places as the pass does (domain.Place,
// domain.PlaceGang) on the workers' loads read in the transaction, without
// preempting; what does not fit stays PENDING for the pass, and so does a
// task with a step concurrency or rate limits, whose state only the pass
// reads.
//
// Fair share needs no other gate: a fresh run's task is placed here only
// when no task of another run waits in its band or above, so it passes
// over no other project's task; when one waits, the pass places it, in
// the fair-share order. Among the runs of one start, it interleaves their
// projects and keys (domain.FairOrder from nothing live: the live counts
// and weights are the pass's reads, not worth a start's).
//
// The placement lock is held to the start's commit, so that neither a
// pass nor another start reads loads without the attempts it binds. A
// start never waits for it: its transaction holds run locks meanwhile, and
// on a busy machine the wait costs more than the pass it saves. A nil
// *freshPlacement places nothing.
type freshPlacement struct {
	s *Scheduler
	// locked is set when the start's transaction holds the placement
	// lock; placed once it placed.
	locked, placed bool
	attempts       []store.Assigned
	traces         map[int64]string
}

// freshPlacement returns a placement for the runs one start transaction
// starts, nil when this replica does not lead.
func (s *Scheduler) freshPlacement() *freshPlacement {
	if !s.IsLeader() {
		return nil
	}
	return &freshPlacement{s: s}
}

// lockedPlacement records whether the start's transaction got the
// placement lock.
func (f *freshPlacement) lockedPlacement(locked bool) {
	if f != nil {
		f.locked = locked
	}
}

// place binds, in tx, the PENDING tasks of the runs of keys (started by tx)
// that fit (store.AssignTasks: their events follow the start's), and
// returns the runs all of whose tasks it bound. It places nothing when it
// does not apply (see freshPlacement), or when called a second time.
func (f *freshPlacement) place(ctx context.Context, tx *store.Store, keys []domain.RunKey) (map[domain.RunKey]bool, error) {
	if f == nil || len(keys) == 0 || !f.locked || f.placed {
		return nil, nil
	}
	f.placed = true
	tasks, workers, err := tx.Placement().FreshWork(ctx, keys, f.s.cfg.WorkerGrace)
	if err != nil {
		return nil, fmt.Errorf("read fresh work of %d runs: %w", len(keys), err)
	}
	if len(workers) == 0 {
		return nil, nil
	}
	p := &placement{s: f.s, st: tx, workers: workers, views: views(workers), reasons: map[int64]string{}, fresh: true}
	for _, unit := range fairOrder(units(tasks), domain.FairStanding{}) {
		if hasAdmission(unit) {
			continue // a step concurrency or a rate limit: left to the pass, which reads their state
		}
		if err := p.place(ctx, unit); err != nil {
			return nil, err
		}
	}
	attempts, err := tx.Placement().AssignTasks(ctx, p.placed)
	if err != nil {
		return nil, fmt.Errorf("bind %d tasks: %w", len(p.placed), err)
	}
	f.attempts, f.traces = attempts, p.traces
	left := map[domain.RunKey]int{}
	for _, t := range tasks {
		left[domain.RunKey{Project: t.Project, Domain: t.Domain, Run: t.RunName}]++
	}
	for _, a := range attempts {
		left[domain.RunKey{Project: a.Project, Domain: a.Domain, Run: a.RunName}]--
	}
	all := map[domain.RunKey]bool{}
	for k, n := range left {
		all[k] = n == 0
	}
	return all, nil
}

// finish ends the placement once its transaction ended (committed or
// not, which released the placement lock): when the transaction
// committed, it dispatches the attempts it bound. A second call does
// nothing.
func (f *freshPlacement) finish(ctx context.Context, committed bool) {
	if f == nil || !f.placed {
		return
	}
	f.locked, f.placed = false, false
	if committed && len(f.attempts) > 0 {
		f.s.dispatch(ctx, f.attempts, f.traces)
	}
	f.attempts, f.traces = nil, nil
}
