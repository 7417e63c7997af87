package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// preemptAttempt evicts a live attempt for a higher band (Iris's
// preempt_task). An attempt still ASSIGNED never started: it becomes
// PREEMPTED at once and its task is requeued for free, in one transaction
// that takes the lock order (run, action, task, then the attempt). A started
// attempt (BUILDING or RUNNING) gets a kill request with cause preempted
// (killRequested): the reconciler stops its process, and the executor's
// PREEMPTED report charges the task's preemption budget and requeues it; its
// resources stay held until then, so nothing is placed on top of a process
// that still runs.
func (s *Scheduler) preemptAttempt(ctx context.Context, attemptID int64) (ev Evaluation, killRequested bool, err error) {
	err = s.store.InTx(ctx, func(tx *store.Store) error {
		ev, killRequested = Evaluation{}, false
		run, act, t, a, err := tx.Tasks().LockAttemptOwners(ctx, attemptID)
		if err != nil {
			return fmt.Errorf("lock attempt and owners: %w", err)
		}
		now := time.Now().UTC()
		claimed, ok, err := tx.Attempts().PreemptAssignedAttempt(ctx, t, attemptID, now)
		if err != nil {
			return fmt.Errorf("preempt assigned attempt of task %d: %w", t.ID, err)
		}
		if ok {
			evs := make([]Evaluation, 1)
			err := s.decideAll(ctx, tx, []store.AttemptOwners{{Run: run, Action: act, Task: t, Attempt: claimed}}, evs, true, nil, now)
			ev = evs[0]
			return err
		}
		if !a.State.IsLive() {
			return nil
		}
		err = tx.Aborts().RequestAttemptKill(ctx, attemptID, domain.CausePreempted)
		if errors.Is(err, store.ErrTerminal) {
			return nil // it ended meanwhile: nothing to evict
		}
		killRequested = err == nil
		if err != nil {
			return fmt.Errorf("request kill: %w", err)
		}
		return nil
	})
	if err != nil {
		return ev, killRequested, fmt.Errorf("preempt attempt %d: %w", attemptID, err)
	}
	if ev.Done {
		s.metrics.evaluated.WithLabelValues(ev.Result.String()).Inc()
		s.afterEvaluation(ctx, ev)
	}
	return ev, killRequested, nil
}

// preempt evicts lower-band attempts so that r fits on one worker (Iris's
// preemption pass). It returns that worker's index when the room is free now
// (every victim was still ASSIGNED), or -1 with a reason: no eviction helps,
// or started victims are being killed and the task is placed once they stop.
func (p *placement) preempt(ctx context.Context, r domain.TaskRequest) (int, string, error) {
	if !p.mayPreempt(r.Priority) {
		return -1, "", nil
	}
	if !p.loaded {
		if err := p.loadRunning(ctx); err != nil {
			return -1, "", err
		}
	}
	wi, victims := domain.PickVictims(r, p.views, p.running)
	if wi < 0 {
		return -1, "", nil
	}
	stopping := 0
	for _, v := range victims {
		_, killRequested, err := p.s.preemptAttempt(ctx, v.AttemptID)
		if err != nil {
			return -1, "", err
		}
		p.s.metrics.preempted.Inc()
		if killRequested {
			stopping++
			p.s.killAttempt(ctx, v.AttemptID)
			continue
		}
		p.res.Preempted++
		p.views[wi].Used.CPUMillis -= v.Resources.CPUMillis
		p.views[wi].Used.MemoryBytes -= v.Resources.MemoryBytes
		p.views[wi].FreeSlots++
	}
	p.running = slicesDeleteVictims(p.running, victims)
	if stopping > 0 {
		return -1, fmt.Sprintf("preempting %d lower-priority attempt(s) to make room", stopping), nil
	}
	return wi, "", nil
}

// mayPreempt reports whether a worker had, when the pass read it, a live
// attempt that a task of band pr may preempt: when none had, the pass reads
// no running attempts (loadRunning) for it: under a full load of one band,
// every task left waiting would ask.
func (p *placement) mayPreempt(pr domain.Priority) bool {
	for _, w := range p.workers {
		if w.LowestPriority != nil && pr.CanPreempt(domain.Priority(*w.LowestPriority)) {
			return true
		}
	}
	return false
}

func (p *placement) loadRunning(ctx context.Context) error {
	ids := make([]string, len(p.workers))
	index := map[string]int{}
	for i, w := range p.workers {
		ids[i] = w.ID
		index[w.ID] = i
	}
	live, err := p.st.Placement().LiveOnWorkers(ctx, ids)
	if err != nil {
		return fmt.Errorf("read live attempts on %d workers: %w", len(ids), err)
	}
	for _, l := range live {
		p.running = append(p.running, domain.Running{AttemptID: l.AttemptID, Worker: index[l.WorkerID],
			Priority: domain.Priority(l.Priority), Resources: domain.Resources{CPUMillis: l.CPUMillis, MemoryBytes: l.MemoryBytes},
			Started: l.State != domain.TaskAssigned, Order: l.AttemptID})
	}
	p.loaded = true
	return nil
}

func slicesDeleteVictims(running, victims []domain.Running) []domain.Running {
	gone := map[int64]bool{}
	for _, v := range victims {
		gone[v.AttemptID] = true
	}
	out := running[:0]
	for _, r := range running {
		if !gone[r.AttemptID] {
			out = append(out, r)
		}
	}
	return out
}
