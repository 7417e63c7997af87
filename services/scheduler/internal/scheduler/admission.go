package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
)

// waitsForSlot reports whether run waits for a slot of its concurrency
// key: it has a key and no slot, and is unfinished or waiting to restart.
func waitsForSlot(run store.Run) bool {
	return run.ConcurrencyKey != nil && run.AdmittedAt == nil && (run.EndedAt == nil || run.RestartRequestedAt != nil)
}

// afterAdmission is what an admission leaves for after its transaction's
// commit: the aborts it recorded to push, the holders to cancel, and the
// keys whose line may move on.
type afterAdmission struct {
	aborts []domain.ActionKey
	cancel []domain.RunKey
	lines  []lineKick
}

// lineKick asks for the first n runs waiting in the line of key to be
// started: n slots of it may be free.
type lineKick struct {
	key store.ConcurrencyKey
	n   int
}

// with returns a and b together.
func (a afterAdmission) with(b afterAdmission) afterAdmission {
	return afterAdmission{aborts: append(a.aborts, b.aborts...), cancel: append(a.cancel, b.cancel...),
		lines: append(a.lines, b.lines...)}
}

// admission is what admit decided of the runs it was given.
type admission struct {
	// admitted marks the runs that took a slot (their AdmittedAt is set
	// in the caller's copy too).
	admitted map[domain.RunKey]bool
	// ended marks the runs that ended ABORTED at once.
	ended map[domain.RunKey]bool
	after afterAdmission
}

// admit decides, in tx, the admission of runs (locked by tx, each
// waitsForSlot): it takes their keys' locks (store.LockConcurrencyKeys),
// reads each key's holders and line (store.Lines) and applies
// domain.DecideAdmission key by key: the admitted take their slot, the
// waiting get a pending_reason naming the key and their place, and a run
// a strategy ends is aborted (its root, through the abort path, reason
// concurrency). Holders to cancel are left for after the commit (cancel:
// each in a transaction of its own, as the API's abort), with the aborts
// to push and the lines that may move on: a key with a slot free that
// waiting runs outside runs may take. A run that no longer waits is
// admitted.
func (s *Scheduler) admit(ctx context.Context, tx *store.Store, runs []*store.Run, now time.Time) (admission, error) {
	out := admission{admitted: map[domain.RunKey]bool{}, ended: map[domain.RunKey]bool{}}
	if len(runs) == 0 {
		return out, nil
	}
	byKey := map[domain.RunKey]*store.Run{}
	var lockKeys []store.ConcurrencyKey
	cands := make([]domain.RunKey, 0, len(runs))
	for _, r := range runs {
		k := runKeyOf(*r)
		byKey[k] = r
		cands = append(cands, k)
		lockKeys = append(lockKeys, store.ConcurrencyKey{Project: r.Project, Domain: r.Domain, Key: *r.ConcurrencyKey})
	}
	if err := tx.Runs().LockConcurrencyKeys(ctx, lockKeys); err != nil {
		return out, fmt.Errorf("lock %d concurrency keys: %w", len(lockKeys), err)
	}
	waiting, holders, err := tx.Runs().Lines(ctx, cands)
	if err != nil {
		return out, fmt.Errorf("read the lines of %d runs: %w", len(cands), err)
	}
	lines := map[store.ConcurrencyKey]*domain.AdmissionLine{}
	var order []store.ConcurrencyKey
	line := func(ck store.ConcurrencyKey, spec domain.WorkflowSpec) *domain.AdmissionLine {
		l, ok := lines[ck]
		if !ok {
			l = &domain.AdmissionLine{MaxRuns: spec.Concurrency.MaxRuns, Strategy: spec.Concurrency.StrategyOrDefault()}
			lines[ck] = l
			order = append(order, ck)
		}
		return l
	}
	still := map[domain.RunKey]bool{}
	for _, c := range waiting {
		k := domain.RunKey{Project: c.Project, Domain: c.Domain, Run: c.Run}
		still[k] = true
		l := line(store.ConcurrencyKey{Project: c.Project, Domain: c.Domain, Key: c.Key}, byKey[k].Spec)
		l.Candidates = append(l.Candidates, domain.LineRun{Run: c.Run, Ahead: c.Ahead, Newer: c.Newer})
	}
	for _, h := range holders {
		ck := store.ConcurrencyKey{Project: h.Project, Domain: h.Domain, Key: h.Key}
		if l, ok := lines[ck]; ok {
			l.Holders = append(l.Holders, domain.LineRun{Run: h.Run, Newer: h.Newer, Stopping: h.Stopping})
		}
	}
	for _, k := range cands {
		if !still[k] { // admitted or ended meanwhile: nothing to decide
			out.admitted[k] = true
		}
	}
	var admitted []domain.RunKey
	reasons := map[domain.RunKey]string{}
	for _, ck := range order {
		l := lines[ck]
		d := domain.DecideAdmission(*l)
		at := func(name string) domain.RunKey {
			return domain.RunKey{Project: ck.Project, Domain: ck.Domain, Run: name}
		}
		for _, name := range d.Admit {
			k := at(name)
			admitted, out.admitted[k] = append(admitted, k), true
			byKey[k].AdmittedAt = &now
		}
		for name, place := range d.Wait {
			reasons[at(name)] = domain.WaitReason(ck.Key, place, l.MaxRuns)
		}
		for _, name := range d.End {
			out.ended[at(name)] = true
			out.after.aborts = append(out.after.aborts, at(name).Action(domain.RootActionName))
		}
		for _, name := range d.Cancel {
			out.after.cancel = append(out.after.cancel, at(name))
		}
		if free := l.MaxRuns - len(l.Holders) - len(d.Admit); len(d.Wait) > 0 && free > 0 {
			out.after.lines = append(out.after.lines, lineKick{ck, free}) // runs ahead, not among runs, may take them
		}
	}
	s.metrics.admissions.WithLabelValues("admitted").Add(float64(len(admitted)))
	s.metrics.admissions.WithLabelValues("waiting").Add(float64(len(reasons)))
	s.metrics.admissions.WithLabelValues("ended").Add(float64(len(out.ended)))
	if err := tx.Runs().SetAdmission(ctx, admitted, reasons); err != nil {
		return out, fmt.Errorf("record the admission of %d runs: %w", len(cands), err)
	}
	slices.SortFunc(out.after.aborts, func(a, b domain.ActionKey) int { return cmpKeys(a.RunKey, b.RunKey) })
	for _, root := range out.after.aborts { // the runs are locked: their aborts cannot fail on a lock
		if _, err := tx.Aborts().AbortAction(ctx, root, domain.AbortReasonConcurrency, store.CauseAborted); err != nil &&
			!errors.Is(err, store.ErrTerminal) {
			return out, fmt.Errorf("end run %s: %w", root.RunKey, err)
		}
	}
	return out, nil
}

// finishAdmission does what an admission left for after its commit: it
// pushes the aborts it recorded, cancels the holders it named (each
// aborted in a transaction of its own; one that ended meanwhile needs
// none) and starts the first runs of the lines that may move on
// (kickLine). A failure is logged: the sweep and the reconciler's scan
// heal it.
func (s *Scheduler) finishAdmission(ctx context.Context, a afterAdmission) {
	for _, root := range a.aborts {
		s.enqueueAbort(ctx, root)
	}
	for _, run := range a.cancel {
		root := run.Action(domain.RootActionName)
		_, err := s.store.Aborts().AbortAction(ctx, root, domain.AbortReasonConcurrency, store.CauseAborted)
		switch {
		case errors.Is(err, store.ErrTerminal), errors.Is(err, store.ErrNotFound):
		case err != nil:
			s.log.Warn("cancel of a run in progress failed; the next admission of its key tries again", "run", run.String(), "err", err)
		default:
			s.metrics.concurrencyCancels.Inc()
			s.enqueueAbort(ctx, root)
		}
	}
	for _, k := range a.lines {
		s.kickLine(ctx, k.key, k.n)
	}
}

// kickLine pushes run:start of the first n runs waiting in ck's line (at
// most maxKick): each is admitted or left waiting by its own advance.
func (s *Scheduler) kickLine(ctx context.Context, ck store.ConcurrencyKey, n int) {
	keys, err := s.store.Runs().KeyWaiters(ctx, ck, min(n, maxKick))
	if err != nil {
		s.log.Warn("read the line of a concurrency key failed; the sweep starts it", "key", ck.Key, "err", err)
		return
	}
	for _, k := range keys {
		s.enqueueStart(ctx, k)
	}
}

// maxKick bounds the runs one kickLine starts; the sweep starts more.
const maxKick = 16

// enqueueStart pushes run:start of a waiting run; a failed push is healed by
// the sweep.
func (s *Scheduler) enqueueStart(ctx context.Context, key domain.RunKey) {
	if err := s.queue.Enqueue(ctx, queue.NewRunStartTask(key)); err != nil {
		s.log.Warn("enqueue run start failed; the sweep starts it", "run", key.String(), "err", err)
	}
}

// lineSweepTicks is how many Ticks apart the leader sweeps the lines: the
// sweep heals what a lost or late message left (a freed slot is otherwise
// taken at once, by the push of the run that freed it or of its delivered
// abort), and reads every line.
const lineSweepTicks = 5

// sweepLines starts the first runs of every line with a free slot
// (store.LineHeads): what heals a lost run:start, or a slot freed by an
// abort that completed after its run's last advance. It returns how many
// runs it pushed.
func (s *Scheduler) sweepLines(ctx context.Context) int {
	keys, err := s.store.Runs().LineHeads(ctx, s.cfg.Resync.Limit)
	if err != nil {
		s.log.Warn("sweep of the concurrency lines failed", "err", err)
		return 0
	}
	for _, k := range keys {
		s.enqueueStart(ctx, k)
	}
	return len(keys)
}

// sortRuns sorts runs in the lock order.
func sortRuns(runs []*store.Run) {
	slices.SortFunc(runs, func(a, b *store.Run) int { return cmpKeys(runKeyOf(*a), runKeyOf(*b)) })
}
