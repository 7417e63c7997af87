package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// decideAll settles claimed[i] into evs[i] (settleAll), then advances each
// run whose actions ended or paused, once (advanceAll). The caller locked
// every run first, then the actions, tasks and attempts, in the lock
// order; an advance locks only rows of its own run, whose lock the
// transaction holds, or the catalog's, which no holder of a run's row
// waits on. The runs' root moves wait for the commit, made in one
// statement with all the events (store.SetRootPhase). wasAssigned is true
// for an attempt preempted while still ASSIGNED (Iris's preempt_task);
// whole are the actions whose unfinished tasks the transaction holds
// (siblingsFirst).
func (s *Scheduler) decideAll(ctx context.Context, tx *store.Store, claimed []store.AttemptOwners, evs []Evaluation,
	wasAssigned bool, whole holding, now time.Time) error {
	if err := s.settleAll(ctx, tx, claimed, evs, wasAssigned, whole, now); err != nil {
		return err
	}
	return s.advanceAll(ctx, tx, claimed, evs, now)
}

// errSettleAlone: an attempt of the batch moved its action while another
// attempt of that action waits to be settled on the action as locked; the
// batch rolls back and each attempt is evaluated on its own
// (handleEvaluations).
var errSettleAlone = errors.New("an action moved before its other attempts of the batch were settled")

// settleAll settles claimed[i] into evs[i], in order. The task rows are
// each attempt's own; an action's row is shared by its attempts, and stays
// true while no settle moves it. Of a SUCCEEDED attempt with a later one
// of its action in the batch, the settle leaves the action's phase for
// that later one to derive (settlement.deriveLater), from the counts all
// of them left: one count of the action's tasks, not one a replica. A
// success moves a job's phase only when it is the last live task's (Iris's
// _compute_job_state), so the phases the earlier successes would derive
// are the action's own. Any other attempt derives its action's phase at
// once, and one that moves an action another attempt of the batch still
// waits on returns errSettleAlone.
//
// A SUCCEEDED attempt whose settle writes nothing but its task's outcome
// (defers) leaves that write for one statement with the others'
// (store.UpdateTaskOutcomes), made before the next settle that writes or
// reads anything else, and at the end: every statement a settle makes
// then sees the outcomes of the batch's attempts before it, as when each
// was written in turn, and the events keep their order. A batch of 100
// replicas' successes so writes 99 of its tasks in one statement.
func (s *Scheduler) settleAll(ctx context.Context, tx *store.Store, claimed []store.AttemptOwners, evs []Evaluation,
	wasAssigned bool, whole holding, now time.Time) error {
	var deferred []store.OutcomeWrite
	for i, o := range claimed {
		later := slices.ContainsFunc(claimed[i+1:], func(n store.AttemptOwners) bool { return keyOf(n.Action) == keyOf(o.Action) })
		w := settlement{deriveLater: later && o.Attempt.State == domain.TaskSucceeded, whole: whole}
		if defers(o, w.deriveLater) {
			w.deferred = &deferred
		} else {
			if err := tx.Tasks().UpdateTaskOutcomes(ctx, now, deferred...); err != nil {
				return fmt.Errorf("update outcomes of %d tasks: %w", len(deferred), err)
			}
			deferred = deferred[:0]
		}
		if err := s.settle(ctx, tx, &evs[i], o.Action, o.Task, o.Attempt, wasAssigned, w, now); err != nil {
			return fmt.Errorf("settle attempt %d: %w", o.Attempt.ID, err)
		}
		moved := evs[i].ActionPhase != "" && evs[i].ActionPhase != domain.Phase(o.Action.Phase)
		if moved && later {
			return fmt.Errorf("settle attempt %d: %w", o.Attempt.ID, errSettleAlone)
		}
	}
	if err := tx.Tasks().UpdateTaskOutcomes(ctx, now, deferred...); err != nil {
		return fmt.Errorf("update outcomes of %d tasks: %w", len(deferred), err)
	}
	return nil
}

// settlement is how settleAll has settle write one attempt's settle.
type settlement struct {
	// deriveLater is set when a later attempt of the same action in the
	// batch derives the action's phase from the counts all of them left:
	// this settle leaves the phase as it is.
	deriveLater bool
	// deferred, when not nil, takes the task's outcome for
	// store.UpdateTaskOutcomes instead of decideTask writing it.
	deferred *[]store.OutcomeWrite
	// whole are the actions whose unfinished tasks the transaction holds.
	whole holding
}

// holds reports whether the transaction holds every unfinished task of
// the action.
func (w settlement) holds(key domain.ActionKey) bool { return slices.Contains(w.whole, key) }

// holding names actions whose unfinished tasks a transaction locked with
// its own (store.LockAndClaimAttempts's whole).
type holding []domain.ActionKey

// defers reports whether the settle of a claimed attempt writes nothing
// but its task's outcome: it SUCCEEDED, and it settles alone
// (aloneSettles), or its task is one of several of the action (not
// onlyTask), the latest attempt of a live task, the step caches nothing,
// and a later attempt of the batch derives the action's phase
// (deriveLater).
func defers(o store.AttemptOwners, deriveLater bool) bool {
	t, a, act := o.Task, o.Attempt, o.Action
	return a.State == domain.TaskSucceeded && (aloneSettles(o) || deriveLater && !onlyTask(act, t) && t.State.IsLive() &&
		t.State != domain.TaskKilled && t.AttemptCount == a.Number && act.Spec.Cache == nil)
}

// aloneSettles reports whether the settle of a claimed attempt writes
// nothing but its task's outcome, which then carries its action's move:
// the attempt is its live task's latest, the task its action's only one
// (onlyTask) and not coscheduled, and the step caches nothing
// (finalizeCache). The action's phase then comes from that task's state
// alone, with no count of its tasks to read the write back.
func aloneSettles(o store.AttemptOwners) bool {
	t, a, act := o.Task, o.Attempt, o.Action
	return t.State.IsLive() && t.State != domain.TaskKilled && t.AttemptCount == a.Number && !t.Coscheduled &&
		onlyTask(act, t) && act.Spec.Cache == nil
}

// advanceAll advances, once each and in claimed's order, the runs of
// claimed whose attempts ended or paused an action, as of the last such
// attempt of the run. When several of them read their step actions, those
// are read together first (store.StepActionsOfRuns), after every settle of
// the batch wrote its actions: an advance writes only its own run's rows,
// so the others' stay as read. The plain task steps they start are
// created together at the end (taskStarts).
func (s *Scheduler) advanceAll(ctx context.Context, tx *store.Store, claimed []store.AttemptOwners, evs []Evaluation,
	now time.Time) error {
	var at []int
	var keys []domain.RunKey
	for i := range claimed {
		if i+1 < len(claimed) && sameRun(claimed[i+1], claimed[i]) {
			continue // not the run's last attempt
		}
		if j := lastAdvancing(claimed, evs, i); j >= 0 {
			at = append(at, j)
			if readsSteps(claimed[j].Run, claimed[j].Action, evs[j].ActionPhase) {
				keys = append(keys, runKeyOf(claimed[j].Run))
			}
		}
	}
	var steps map[domain.RunKey][]store.Action
	if len(keys) > 1 {
		var err error
		if steps, err = tx.Actions().StepActionsOfRuns(ctx, keys); err != nil {
			return fmt.Errorf("read step actions of %d runs: %w", len(keys), err)
		}
	}
	var later taskStarts
	for _, j := range at {
		run := claimed[j].Run
		known := knownSteps(run, claimed[j].Action, evs[j].ActionPhase)
		if read := steps[runKeyOf(run)]; known == nil && len(read) == len(run.Spec.Steps) {
			known = read
		}
		adv, err := s.progressFrom(ctx, tx, run, known, &later, judging{}, now)
		evs[j].Advance = &adv
		if err != nil {
			return fmt.Errorf("advance run %s: %w", runKeyOf(run), err)
		}
	}
	if err := tx.Tasks().CreateTasksOfRuns(ctx, now, later...); err != nil {
		return fmt.Errorf("create tasks of %d runs: %w", len(later), err)
	}
	return nil
}

// taskStarts gathers the plain task steps that a batch's advances start,
// created together at the batch's end (store.CreateTasksOfRuns): one
// statement for the runs of the batch, not one a run.
type taskStarts []store.RunStart

// add adds the steps of run that start (none: nothing).
func (l *taskStarts) add(run domain.RunKey, steps []store.StartedStep) {
	if len(steps) > 0 {
		*l = append(*l, store.RunStart{Run: run, Steps: steps})
	}
}

// readsSteps reports whether the advance of run after act moved to phase
// reads the run's step actions (progressFrom's stepActions): the run is
// neither QUEUED (its first advance expands it) nor ended, no restart
// changes its steps first, and they are not known without a read
// (knownSteps).
func readsSteps(run store.Run, act store.Action, phase domain.Phase) bool {
	p := domain.Phase(run.Phase)
	return run.RestartRequestedAt == nil && p != domain.PhaseQueued && !p.IsTerminal() &&
		knownSteps(run, act, phase) == nil
}

// runKeyOf returns run's key.
func runKeyOf(run store.Run) domain.RunKey {
	return domain.RunKey{Project: run.Project, Domain: run.Domain, Run: run.Name}
}

// lastAdvancing returns the index of the last evaluation of the run of
// claimed[end] (whose attempts end at end) that advances its run, or -1:
// that run advances once, after all its attempts were settled.
func lastAdvancing(claimed []store.AttemptOwners, evs []Evaluation, end int) int {
	for j := end; j >= 0 && sameRun(claimed[j], claimed[end]); j-- {
		if evs[j].advances() {
			return j
		}
	}
	return -1
}

// sameRun reports whether two claimed attempts are of one run.
func sameRun(a, b store.AttemptOwners) bool {
	return a.Run.Project == b.Run.Project && a.Run.Domain == b.Run.Domain && a.Run.Name == b.Run.Name
}
