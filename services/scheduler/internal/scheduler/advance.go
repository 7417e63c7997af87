package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
)

// Advance is what one advance of a run did.
type Advance struct {
	// Started lists the steps whose tasks were created.
	Started []string
	// Phase is the run's phase afterwards.
	Phase domain.Phase
	// placed is set when the advance bound every task it created
	// (freshPlacement): no pass need place them.
	placed bool
	// after is what its admission, or the end of a run holding a
	// concurrency slot, leaves for after the commit (finishAdmission).
	after afterAdmission
	// kin is what the advance leaves for after the commit about child runs
	// (afterKin): children to start and abort, a parent to advance.
	kin kinWork
	// judge, when set, are the conditions the advance needed and had no
	// verdict for: after the commit, afterAdvance evaluates them and
	// advances the run again (judgeAndAdvance).
	judge *judgement
}

// handleRun is the run:start and run:advance handler: it advances the run.
func (s *Scheduler) handleRun(ctx context.Context, t *asynq.Task) error {
	var p queue.RunPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	_, err := s.advance(ctx, p.Key())
	return err
}

// advance moves a run's workflow forward: a batch of one (advanceRuns).
// A terminal run is left alone. A run that does not exist is a permanent
// failure (asynq.SkipRetry).
func (s *Scheduler) advance(ctx context.Context, key domain.RunKey) (Advance, error) {
	advs, errs := s.advanceRuns(ctx, []domain.RunKey{key})
	return advs[0], errs[0]
}

// advanceAlone advances a run that advanceRuns could not lock, in a
// transaction of its own that waits for the run's lock: it expands the run
// on its first advance and applies progress, as progressFrom does. A run
// that does not exist is a permanent failure (asynq.SkipRetry).
func (s *Scheduler) advanceAlone(ctx context.Context, key domain.RunKey) (Advance, error) {
	return s.advanceJudged(ctx, key, judging{})
}

// advanceJudged is advanceAlone deciding the run's conditions as j says.
func (s *Scheduler) advanceJudged(ctx context.Context, key domain.RunKey, j judging) (Advance, error) {
	var adv Advance
	err := s.store.InTx(ctx, func(tx *store.Store) error {
		run, err := tx.Runs().LockRun(ctx, key)
		if err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		adv, err = s.progressFrom(ctx, tx, run, nil, nil, j, s.now())
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return adv, fmt.Errorf("advance run %s: %w: %w", key, err, asynq.SkipRetry)
	}
	if err != nil {
		return adv, fmt.Errorf("advance run %s: %w", key, err)
	}
	return s.afterAdvance(ctx, adv), nil
}

// afterAdvance kicks a placement pass for started steps whose tasks are
// not all bound yet, does what an admission left (finishAdmission), counts
// ended runs, and, when the advance needed conditions it had no verdict
// for, evaluates them and advances the run again (judgeAndAdvance). It
// returns the advance with what that next one did.
func (s *Scheduler) afterAdvance(ctx context.Context, adv Advance) Advance {
	s.finishAdmission(ctx, adv.after)
	s.afterKin(ctx, adv.kin)
	if len(adv.Started) > 0 && !adv.placed {
		s.Kick()
	}
	if adv.Phase.IsTerminal() {
		s.metrics.runsEnded.WithLabelValues(string(adv.Phase)).Inc()
	}
	if adv.judge != nil {
		return s.judgeAndAdvance(ctx, adv)
	}
	return adv
}

// progress moves a run (locked by the caller, in tx) forward: it applies a
// pending restart, expands the run when its step actions are missing, ends
// the waits that are over (resolveWaits), decides with domain.Evaluate which
// steps start now and which are SKIPPED and the run's phase, and applies
// that: the started steps, the SKIPPED ones, a0's and the run's phase
// (forward only).
func (s *Scheduler) progress(ctx context.Context, tx *store.Store, run store.Run, now time.Time) (Advance, error) {
	return s.progressFrom(ctx, tx, run, nil, nil, judging{}, now)
}

// progressFrom is progress from the run's step actions as the caller knows
// them (steps), or as read when steps is nil or the run restarts; later,
// when not nil, gathers the plain task steps it starts (evaluateSteps); j
// is how it decides the steps' conditions. A
// run that waits for a slot of its concurrency key (waitsForSlot) is
// admitted first (admit), and left as it is while it waits; a run that
// holds one and is terminal afterwards lets its key's line move on.
func (s *Scheduler) progressFrom(ctx context.Context, tx *store.Store, run store.Run, steps []store.Action,
	later *taskStarts, j judging, now time.Time) (adv Advance, err error) {
	key := domain.RunKey{Project: run.Project, Domain: run.Domain, Run: run.Name}
	if waitsForSlot(run) {
		a, err := s.admit(ctx, tx, []*store.Run{&run}, now)
		if err != nil {
			return Advance{Phase: domain.Phase(run.Phase)}, err
		}
		if !a.admitted[key] {
			adv := Advance{Phase: domain.Phase(run.Phase), after: a.after}
			if a.ended[key] {
				adv.Phase = domain.PhaseAborted
			}
			return adv, nil
		}
		defer func() { adv.after = a.after.with(adv.after) }()
	}
	if run.ConcurrencyKey != nil && run.AdmittedAt != nil {
		defer func() {
			if adv.Phase.IsTerminal() {
				adv.after.lines = append(adv.after.lines, lineKick{n: 1, // the slot it held
					key: store.ConcurrencyKey{Project: run.Project, Domain: run.Domain, Key: *run.ConcurrencyKey}})
			}
		}()
	}
	if run.RestartRequestedAt != nil {
		steps = nil // the restart changes them
		if err := s.restart(ctx, tx, &run, now); err != nil {
			return Advance{}, err
		}
	}
	adv = Advance{Phase: domain.Phase(run.Phase), kin: kinWork{parent: parentRun(run)}}
	if adv.Phase.IsTerminal() {
		adv.kin.moved = true // its parent learns of its end however it ended (an abort)
		return adv, nil
	}
	if steps == nil {
		if steps, err = s.stepActions(ctx, tx, run, key); err != nil {
			return adv, err
		}
	}
	if adv.Started, err = s.resolveWaits(ctx, tx, run, steps, &adv, now); err != nil {
		return adv, err
	}
	if err := s.followChildren(ctx, tx, run, steps, &adv, now); err != nil {
		return adv, err
	}
	p, err := s.evaluateSteps(ctx, tx, run, steps, &adv, later, j, now)
	if err != nil {
		return adv, err
	}
	return adv, moveRoot(ctx, tx, key, &adv, p.Phase, now)
}

// moveRoot moves the run's root action and row from adv.Phase to phase
// (forward only; tx.SetRootPhase) and records it in adv.
func moveRoot(ctx context.Context, tx *store.Store, key domain.RunKey, adv *Advance, phase domain.Phase,
	now time.Time) error {
	if !domain.CanMovePhase(adv.Phase, phase) {
		return nil
	}
	from := adv.Phase
	adv.Phase, adv.kin.moved = phase, true
	if err := tx.Actions().SetRootPhase(ctx, key, from, phase, now); err != nil {
		return fmt.Errorf("move root from %s to %s: %w", from, phase, err)
	}
	return nil
}

// freshStart decides the first advance of a QUEUED run from the status a
// fresh expansion has (every step QUEUED, not started): the same decision
// as evaluateSteps makes from the expanded steps. ok is false unless that
// decision is only plain task steps to start (no SKIPPED step, no wait, no
// cache, no step FAILED by its condition, no CEL condition to evaluate:
// none is evaluated here, under the run's lock); else fr holds the run's
// steps and the started ones' new tasks.
func (s *Scheduler) freshStart(run store.Run, now time.Time) (p domain.Progress, fr store.FreshRun, ok bool) {
	if domain.Phase(run.Phase) != domain.PhaseQueued || len(run.Spec.Steps) == 0 {
		return p, fr, false
	}
	steps := run.Spec.StepsWithParams(run.Params)
	status := make(map[string]domain.StepStatus, len(steps))
	byName := make(map[string]domain.Step, len(steps))
	for _, st := range steps {
		status[st.Name], byName[st.Name] = domain.StepStatus{Phase: domain.PhaseQueued}, st
	}
	p = domain.EvaluateWith(run.Spec, status, run.SuspendRequestedAt != nil, run.Params, domain.Verdicts{})
	if len(p.Skip) > 0 || len(p.Fail) > 0 || len(p.Unjudged) > 0 {
		return p, fr, false
	}
	fr = store.FreshRun{Key: domain.RunKey{Project: run.Project, Domain: run.Domain, Run: run.Name}, Steps: steps,
		Started: make([]store.StartedStep, 0, len(p.Start))}
	for _, name := range p.Start {
		st := byName[name]
		if !plainTaskStep(st) {
			return p, fr, false
		}
		fr.Started = append(fr.Started, store.StartedStep{Action: name, Tasks: s.newTasks(fr.Key.Action(name), st, 0, run.Params, now)})
	}
	return p, fr, true
}

// stepActions returns the run's step actions, expanding the run first when
// any is missing. A QUEUED run is expanded at once: it usually was never
// advanced, and when it was, the expansion inserts nothing and reads them.
func (s *Scheduler) stepActions(ctx context.Context, tx *store.Store, run store.Run, key domain.RunKey) ([]store.Action, error) {
	if domain.Phase(run.Phase) == domain.PhaseQueued && len(run.Spec.Steps) > 0 {
		steps, err := tx.Runs().ExpandSteps(ctx, key, run.Spec.StepsWithParams(run.Params))
		if err != nil {
			return steps, fmt.Errorf("expand %d steps: %w", len(run.Spec.Steps), err)
		}
		return steps, nil
	}
	steps, err := tx.Actions().StepActions(ctx, key)
	if err != nil {
		return steps, fmt.Errorf("read step actions: %w", err)
	}
	if len(steps) != len(run.Spec.Steps) {
		if steps, err = tx.Runs().ExpandSteps(ctx, key, run.Spec.StepsWithParams(run.Params)); err != nil {
			return steps, fmt.Errorf("expand %d steps: %w", len(run.Spec.Steps), err)
		}
	}
	return steps, nil
}

// evaluateSteps decides with domain.Evaluate what starts and what is
// SKIPPED or FAILED (its conditions as j decides them: from verdicts, with
// none evaluated under the run's locks, until its last round) and applies
// it, adding the started steps to adv.Started. When a condition had no
// verdict it decides nothing and sets adv.judge for after the commit.
// While a started step SUCCEEDED at once (a cache hit), it decides again
// from the steps as they are now, so its dependents start in the same
// advance. It returns the last decision.
func (s *Scheduler) evaluateSteps(ctx context.Context, tx *store.Store, run store.Run, steps []store.Action,
	adv *Advance, later *taskStarts, j judging, now time.Time) (domain.Progress, error) {
	key := domain.RunKey{Project: run.Project, Domain: run.Domain, Run: run.Name}
	for {
		status, err := stepStatus(ctx, tx, key, run.Spec, steps)
		if err != nil {
			return domain.Progress{}, err
		}
		p := j.evaluate(run, status)
		if len(p.Unjudged) > 0 {
			adv.judge = &judgement{key: key, run: run, status: status, round: j.round}
		}
		hits, err := s.apply(ctx, tx, run, steps, p, adv, later, now)
		adv.Started = append(adv.Started, p.Start...)
		if err != nil || hits == 0 {
			return p, err
		}
		if steps, err = tx.Actions().StepActions(ctx, key); err != nil {
			return p, fmt.Errorf("read step actions: %w", err)
		}
	}
}

// apply starts, skips and fails what p decided for run; it returns how
// many started steps ended at once (from the cache, or a for_each with
// nothing to run). With later, the plain task steps it
// starts last join later instead of being created now, when nothing else
// follows them in this advance (no SKIPPED or FAILED step, no cache hit,
// after which evaluateSteps reads the steps again).
func (s *Scheduler) apply(ctx context.Context, tx *store.Store, run store.Run, steps []store.Action, p domain.Progress,
	adv *Advance, later *taskStarts, now time.Time) (hits int, err error) {
	key, params := runKeyOf(run), run.Params
	byName := make(map[string]store.Action, len(steps))
	for _, a := range steps {
		byName[a.Name] = a
	}
	var tasks []store.StartedStep // task steps, created in one statement
	for _, name := range p.Start {
		a := byName[name]
		if plainTaskStep(a.Spec) {
			tasks = append(tasks, s.startedStep(key, params, a, now))
			continue
		}
		// The steps before this one start first: events keep p.Start's order.
		if err := tx.Tasks().CreateTasks(ctx, key, now, tasks...); err != nil {
			return hits, fmt.Errorf("create tasks of %d steps: %w", len(tasks), err)
		}
		tasks = nil
		hit, err := s.startStep(ctx, tx, run, a, adv, now)
		if err != nil {
			return hits, fmt.Errorf("start step %s: %w", name, err)
		}
		if hit {
			hits++
		}
	}
	if later != nil && hits == 0 && len(p.Skip) == 0 && len(p.Fail) == 0 {
		later.add(key, tasks)
		return 0, nil
	}
	if err := tx.Tasks().CreateTasks(ctx, key, now, tasks...); err != nil {
		return hits, fmt.Errorf("create tasks of %d steps: %w", len(tasks), err)
	}
	for _, name := range p.Skip {
		if err := tx.Actions().SkipStep(ctx, key.Action(name), domain.Phase(byName[name].Phase), p.Reasons[name], now); err != nil {
			return hits, fmt.Errorf("skip step %s: %w", name, err)
		}
	}
	for _, name := range p.Fail {
		if err := tx.Actions().FailStep(ctx, key.Action(name), domain.Phase(byName[name].Phase), p.Reasons[name], now); err != nil {
			return hits, fmt.Errorf("fail step %s: %w", name, err)
		}
	}
	return hits, nil
}

// stepStatus is what progression reads of each step, with the outputs of
// the SUCCEEDED ones when a step's condition may read them.
func stepStatus(ctx context.Context, tx *store.Store, key domain.RunKey, spec domain.WorkflowSpec,
	steps []store.Action) (map[string]domain.StepStatus, error) {
	status := make(map[string]domain.StepStatus, len(steps))
	for _, a := range steps {
		status[a.Name] = domain.StepStatus{Started: a.StartedAt != nil, Phase: domain.Phase(a.Phase)}
	}
	if !readsOutputs(spec, status) {
		return status, nil
	}
	outputs, err := tx.Actions().StepOutputs(ctx, key, nil)
	if err != nil {
		return nil, fmt.Errorf("read step outputs: %w", err)
	}
	for name, out := range outputs {
		st := status[name]
		st.Outputs = out
		status[name] = st
	}
	return status, nil
}

// readsOutputs reports whether a step still to be decided has a condition
// that reads outputs.
func readsOutputs(spec domain.WorkflowSpec, status map[string]domain.StepStatus) bool {
	for _, st := range spec.Steps {
		x := status[st.Name]
		if !x.Started && !x.Phase.IsTerminal() && strings.Contains(st.If, "outputs") {
			return true
		}
	}
	return false
}

// plainTaskStep reports whether a step starts by creating its tasks alone:
// not a suspend or approval (a wait), not a workflow step (a child run),
// not discoverable (the cache first) and not a for_each (its list first).
func plainTaskStep(step domain.Step) bool {
	return step.RunsProcess() && step.Cache == nil && step.ForEach == nil
}

// startedStep returns action a's tasks of its generation as they start
// (newTasks, over the run's params), for store.CreateTasks.
func (s *Scheduler) startedStep(key domain.RunKey, params map[string]any, a store.Action, now time.Time) store.StartedStep {
	return store.StartedStep{Action: a.Name, Tasks: s.newTasks(key.Action(a.Name), a.Spec, a.Generation, params, now)}
}

// startStep starts a step that is not a plain task step (apply creates
// those, domain.StepTasks' replicas carrying the step's scheduling fields, all
// in one statement): a suspend step waits its duration, or for a resume; an
// approval waits for an approve or a reject (KubeVela's suspend and
// approval); a workflow step starts its child runs (startChildStep, whose
// starts adv carries); a for_each step reads its list first
// (startForEach); a discoverable task step goes through the cache first
// (startCached). hit reports that the step ended at once.
func (s *Scheduler) startStep(ctx context.Context, tx *store.Store, run store.Run, a store.Action,
	adv *Advance, now time.Time) (hit bool, err error) {
	key, params := runKeyOf(run), run.Params
	ak := key.Action(a.Name)
	switch a.Spec.Kind {
	case domain.KindSuspend:
		if d := a.Spec.DurationValue(); d > 0 {
			at := now.Add(d)
			return false, tx.Actions().StartWait(ctx, ak, store.WaitDuration, &at, now)
		}
		return false, tx.Actions().StartWait(ctx, ak, store.WaitResume, nil, now)
	case domain.KindApproval:
		return false, tx.Actions().StartWait(ctx, ak, store.WaitApproval, nil, now)
	case domain.KindWorkflow:
		ended, err := s.startChildStep(ctx, tx, run, a, adv, now)
		return ended != "", err // ended at once: decide again, as after a hit
	}
	if a.Spec.ForEach != nil {
		return s.startForEach(ctx, tx, run, a, now)
	}
	return s.startCached(ctx, tx, key, params, a, now)
}
