package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// PlacementConfig tunes the placement pass.
type PlacementConfig struct {
	// BatchSize caps the PENDING tasks one pass reads and places, shared
	// among the fair-share groups (band, project, fairness key) that have
	// any (store.PendingWork): ⌈BatchSize / groups⌉ of each, at most
	// BatchSize groups (a gang the read ends in is read whole beside).
	// Default 500.
	BatchSize int
	// KeysPerProject caps the fairness keys of one project in a band that
	// one pass reads, so that a project of many keys cannot fill the
	// groups of a read (the keys after them in name order wait for their
	// turn). Default 32.
	KeysPerProject int
	// ExpiryEvery is how long a pass that a kick started may follow the
	// last expiry pass without running one (a pass the timer or the tick
	// starts always runs it): under load a pass follows every evaluation,
	// and deadlines, timeouts and timed waits need not be read that often.
	// Default 250ms.
	ExpiryEvery time.Duration
}

func (c *PlacementConfig) defaults() {
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.KeysPerProject = cmp.Or(c.KeysPerProject, 32)
	c.ExpiryEvery = cmp.Or(c.ExpiryEvery, 250*time.Millisecond)
}

// PassResult is what one scheduling pass did.
type PassResult struct {
	Placed    int
	Pending   int
	Workers   int
	Preempted int
	Waiting   int
	// Full is set when the pass's read may have left a placeable task
	// unread (store.PendingRead.Full).
	Full bool
	// TokensDueAt is the earliest time a task left waiting for rate-limit
	// tokens has them (the database's clock); zero when none waits so.
	TokensDueAt time.Time
}

// pass runs one scheduling pass and returns how long to wait before the
// next: at once when it placed every task of a full read (one that may
// have left tasks unread), else until the next backoff or timed wait
// ends or the next rate-limit token a waiting task needs is due
// (PassResult.TokensDueAt), at most Tick (not read while a kick waits: its
// pass comes at once). The pass runs the expiry pass first when timed (the
// timer or the tick started it) or ExpiryEvery has passed since the last
// one; else it places alone.
func (s *Scheduler) pass(ctx context.Context, timed bool) time.Duration {
	s.placedAll.Store(false)
	var res PassResult
	var err error
	if now := time.Now(); timed || now.Sub(s.expiredAt) >= s.cfg.Placement.ExpiryEvery {
		s.expiredAt = now
		res, err = s.runOnce(ctx)
	} else {
		res, err = s.placeOnce(ctx)
	}
	if err != nil {
		s.log.Warn("scheduling pass failed", "err", err)
		return s.cfg.Tick
	}
	if res.Placed > 0 || res.Preempted > 0 {
		s.log.Debug("scheduling pass", "placed", res.Placed, "preempted", res.Preempted, "waiting", res.Waiting,
			"pending", res.Pending, "workers", res.Workers)
	}
	if res.Full && res.Placed > 0 && res.Waiting == 0 {
		return 0
	}
	s.placedAll.Store(res.Waiting == 0 && !res.Full)
	next := s.cfg.Tick
	if len(s.kick) > 0 {
		return next
	}
	if !res.TokensDueAt.IsZero() {
		next = min(next, max(time.Until(res.TokensDueAt), time.Millisecond))
	}
	if at, err := s.store.Placement().NextWakeAt(ctx); err == nil && at != nil {
		next = min(next, max(time.Until(*at), time.Millisecond))
	}
	return next
}

// runOnce is one scheduling pass: it places the pending tasks, highest band
// first, on workers whose labels satisfy their constraints and whose free
// resources and slots fit them (a coscheduled job all together or not at
// all), preempts lower bands for a task that cannot otherwise be placed,
// binds the placed tasks in one statement and dispatches their attempts,
// records a pending_reason on every task left waiting, and ends jobs whose
// scheduling deadline passed (the expiry pass, first).
func (s *Scheduler) runOnce(ctx context.Context) (PassResult, error) {
	start := time.Now()
	defer func() { s.metrics.passSeconds.Observe(time.Since(start).Seconds()) }()
	if _, err := (expiry{s}).runOnce(ctx); err != nil {
		return PassResult{}, fmt.Errorf("expiry pass: %w", err)
	}
	return s.place(ctx)
}

// placeOnce is a scheduling pass without the expiry pass: a task past its
// scheduling deadline stays PENDING, unplaced (store.PendingWork), until
// the next expiry pass ends its job.
func (s *Scheduler) placeOnce(ctx context.Context) (PassResult, error) {
	start := time.Now()
	defer func() { s.metrics.passSeconds.Observe(time.Since(start).Seconds()) }()
	return s.place(ctx)
}

// place is runOnce after its expiry pass. A pass
// that finds no task to place reads no worker: when the load is light,
// every run's end kicks a pass that finds none.
//
// From its read to its bind the pass holds the placement lock in one
// transaction (store.Placement.Lock), which a fresh run's placement in its
// start transaction holds to its commit (freshPlacement): the loads a pass
// reads then hold every attempt bound before.
func (s *Scheduler) place(ctx context.Context) (PassResult, error) {
	p, attempts, err := s.decidePlacement(ctx)
	if p == nil || err != nil {
		return PassResult{}, err
	}
	s.dispatch(ctx, attempts, p.traces)
	p.res.Waiting = len(p.reasons)
	if err := p.st.Placement().SetPendingReasons(ctx, p.reasons); err != nil {
		return p.res, fmt.Errorf("set pending reasons of %d tasks: %w", len(p.reasons), err)
	}
	return p.res, nil
}

// decidePlacement is place's transaction under the placement lock: it
// reads the pending tasks and the workers, places the tasks and binds them
// (assign). p is nil when no task is pending.
func (s *Scheduler) decidePlacement(ctx context.Context) (p *placement, attempts []store.Assigned, err error) {
	err = s.store.InTx(ctx, func(tx *store.Store) error {
		p, attempts = nil, nil
		if err := tx.Placement().Lock(ctx); err != nil {
			return fmt.Errorf("take the placement lock: %w", err)
		}
		var err error
		p, attempts, err = s.placeLocked(ctx, tx)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if p != nil {
		p.st = s.store // its pending reasons are written after the commit
	}
	return p, attempts, nil
}

// placeLocked is decidePlacement in its transaction tx. It places the
// units of the read in the fair-share order (fairOrder).
func (s *Scheduler) placeLocked(ctx context.Context, tx *store.Store) (p *placement, attempts []store.Assigned, err error) {
	read, err := tx.Placement().PendingWork(ctx, s.cfg.Placement.BatchSize, s.cfg.Placement.KeysPerProject,
		s.cfg.WorkerGrace)
	if err != nil {
		return nil, nil, fmt.Errorf("read pending work: %w", err)
	}
	if len(read.Tasks) == 0 {
		return nil, nil, nil
	}
	p = &placement{s: s, st: tx, workers: read.Workers, views: views(read.Workers), reasons: map[int64]string{}}
	p.res = PassResult{Workers: len(read.Workers), Pending: len(read.Tasks), Full: read.Full}
	if err := p.readAdmission(ctx, read.Tasks); err != nil {
		return nil, nil, err
	}
	standing := domain.FairStanding{Weights: read.Weights, Live: map[string]int{}, LiveKeys: read.Live}
	for g, n := range read.Live {
		standing.Live[g.Project] += n
	}
	for _, unit := range fairOrder(units(read.Tasks), standing) {
		if err := p.place(ctx, unit); err != nil {
			return nil, nil, err
		}
	}
	attempts, err = p.assign(ctx)
	return p, attempts, err
}

// placement is the state of one pass.
type placement struct {
	s *Scheduler
	// st is the store the pass's statements run on: the pools, or a
	// fresh run's start transaction.
	st      *store.Store
	workers []store.WorkerLoad
	views   []domain.WorkerView
	reasons map[int64]string
	running []domain.Running // loaded on first preemption
	loaded  bool
	placed  []store.Assignment // bound at the end of the pass
	// traces are the placed tasks' TraceParent, by task id: their attempts
	// are dispatched in the trace their run was created in.
	traces map[int64]string
	res    PassResult
	// fresh is set for a fresh run's placement in its start transaction
	// (freshPlacement), which preempts nothing: a task that does not fit
	// is left to the pass.
	fresh bool
	// adm is the admission state of the pass's tasks with admission
	// fields (readAdmission); nil when none has any.
	adm *taskAdmission
}

// place places one unit: a single task, or every pending task of a gang.
// A unit whose step concurrency or rate limits do not admit it now
// (taskAdmission.check) waits with that reason, before any worker is
// looked at; one placed holds its slots and tokens for the rest of the
// pass.
func (p *placement) place(ctx context.Context, unit []store.Task) error {
	if p.adm != nil {
		if reason := p.adm.check(unit); reason != "" {
			for _, t := range unit {
				p.reasons[t.ID] = reason
			}
			return nil
		}
	}
	reqs := make([]domain.TaskRequest, len(unit))
	for i, t := range unit {
		reqs[i] = request(t)
	}
	var idx []int
	var reason string
	if len(unit) > 1 || unit[0].Coscheduled {
		idx, reason = domain.PlaceGang(reqs, p.views)
	} else {
		var i int
		i, reason = domain.Place(reqs[0], p.views)
		if i < 0 && reqs[0].Priority > domain.PriorityBatch && !p.fresh {
			j, why, err := p.preempt(ctx, reqs[0])
			if err != nil {
				return err
			}
			i = j
			if why != "" {
				reason = why
			}
		}
		if i >= 0 {
			domain.Take(p.views, i, reqs[0].Resources)
			idx = []int{i}
		}
	}
	if idx == nil {
		for _, t := range unit {
			p.reasons[t.ID] = reason
		}
		return nil
	}
	if p.adm != nil {
		p.adm.take(unit)
	}
	for i, t := range unit {
		p.placed = append(p.placed, store.Assignment{TaskID: t.ID, WorkerID: p.workers[idx[i]].ID})
		if t.TraceParent != "" {
			if p.traces == nil {
				p.traces = map[int64]string{}
			}
			p.traces[t.ID] = t.TraceParent
		}
	}
	return nil
}

// assign binds the tasks placed to their workers, all in one statement (a
// gang's tasks together), and returns their attempts. A task that stopped
// being PENDING meanwhile is skipped. The tokens the bound tasks take are
// written in the same transaction (store.Placement.TakeTokens): they
// commit with the bind or not at all.
func (p *placement) assign(ctx context.Context) ([]store.Assigned, error) {
	attempts, err := p.st.Placement().AssignTasks(ctx, p.placed)
	if err != nil {
		return nil, fmt.Errorf("bind %d tasks: %w", len(p.placed), err)
	}
	p.res.Placed += len(attempts)
	if p.adm != nil {
		p.res.TokensDueAt = p.adm.dueAt
		if err := p.st.Placement().TakeTokens(ctx, p.adm.st.Now, p.adm.spent(attempts)); err != nil {
			return nil, fmt.Errorf("take the tokens of %d tasks: %w", len(attempts), err)
		}
	}
	return attempts, nil
}

// units groups pending tasks into placement units: one task, or all pending
// tasks of a coscheduled action (in the order of their first task).
func units(tasks []store.Task) [][]store.Task {
	var out [][]store.Task
	gang := map[string]int{}
	for _, t := range tasks {
		if !t.Coscheduled {
			out = append(out, []store.Task{t})
			continue
		}
		key := t.Project + "/" + t.Domain + "/" + t.RunName + "/" + t.ActionName
		if i, ok := gang[key]; ok {
			out[i] = append(out[i], t)
			continue
		}
		gang[key] = len(out)
		out = append(out, []store.Task{t})
	}
	return out
}

// fairOrder returns us in the fair-share order (domain.FairOrder) from
// standing: each unit by its first task's band, project and run's fairness
// key. Units of one group keep their order.
func fairOrder(us [][]store.Task, standing domain.FairStanding) [][]store.Task {
	if len(us) < 2 {
		return us
	}
	fus := make([]domain.FairUnit, len(us))
	for i, u := range us {
		fus[i] = domain.FairUnit{Band: domain.Priority(u[0].Priority), Project: u[0].Project, Key: u[0].FairnessKey,
			Oldest: u[0].ID, Size: len(u)}
	}
	out := make([][]store.Task, 0, len(us))
	for _, i := range domain.FairOrder(fus, standing) {
		out = append(out, us[i])
	}
	return out
}

func request(t store.Task) domain.TaskRequest {
	return domain.TaskRequest{Priority: domain.Priority(t.Priority), Constraints: t.Constraints, Plugin: t.Plugin,
		Resources: domain.Resources{CPUMillis: t.CPUMillis, MemoryBytes: t.MemoryBytes}}
}

func views(ws []store.WorkerLoad) []domain.WorkerView {
	out := make([]domain.WorkerView, len(ws))
	for i, w := range ws {
		out[i] = domain.WorkerView{ID: w.ID, Labels: w.Labels,
			Capacity:  domain.Resources{CPUMillis: w.CPUMillis, MemoryBytes: w.MemoryBytes},
			Used:      domain.Resources{CPUMillis: w.UsedCPUMillis, MemoryBytes: w.UsedMemoryBytes},
			FreeSlots: max(w.Slots-w.Used, 0)}
	}
	return out
}
