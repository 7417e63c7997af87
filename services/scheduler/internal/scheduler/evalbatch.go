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

// evaluateSucceeded evaluates, in one transaction, the SUCCEEDED attempts
// of ids (store.LockAndClaimAttempts), and returns the ids it left for the
// caller to evaluate one by one (evaluate): the attempts that did not
// succeed (a platform failure goes through ARC's rule first), and all of
// them when the transaction fails or cannot settle them together
// (errSettleAlone).
//
// The transaction locks every run first, then the actions, tasks and
// attempts, level by level, in one statement. It then settles each attempt
// (task, action, cache), a run's in attempt order, and only then advances
// each run whose actions ended, once, so that the runs' root moves wait for
// the commit and are made in one statement with all the events
// (store.SetRootPhase). An advance locks only rows of its own run, whose
// lock the transaction holds, or the catalog's, which no holder of a run's
// row waits on.
func (s *Scheduler) evaluateSucceeded(ctx context.Context, ids []int64) []int64 {
	var evs []Evaluation
	var claimed []store.AttemptOwners
	err := s.store.InTx(ctx, func(tx *store.Store) error {
		now := time.Now().UTC()
		var err error
		if claimed, err = tx.Attempts().LockAndClaimAttempts(ctx, ids, now); err != nil {
			return fmt.Errorf("lock and claim %d attempts: %w", len(ids), err)
		}
		if len(claimed) == 0 {
			return nil
		}
		evs = make([]Evaluation, len(claimed))
		if err := s.settleAll(ctx, tx, claimed, evs, now); err != nil {
			return err
		}
		return s.advanceAll(ctx, tx, claimed, evs, now)
	})
	if err != nil {
		s.log.Warn("batched evaluation failed; each attempt is evaluated on its own", "attempts", len(ids), "err", err)
		return ids
	}
	done := map[int64]bool{}
	for i, ev := range evs {
		done[claimed[i].Attempt.ID] = true
		s.metrics.evaluated.WithLabelValues(ev.Result.String()).Inc()
		s.afterEvaluation(ctx, ev)
	}
	return slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return done[id] })
}

// errSettleAlone: an attempt of the batch moved its action while another
// attempt of that action waits to be settled on the action as locked; the
// batch rolls back and each attempt is evaluated on its own.
var errSettleAlone = errors.New("an action moved before its other attempts of the batch were settled")

// settleAll settles claimed[i] into evs[i], in order. The task rows are
// each attempt's own; an action's row is shared by its attempts, and stays
// true while no settle moves it. Only the last attempt of an action in the
// batch derives the action's phase (Evaluation.deriveLater), from the
// counts all of its attempts left: one count of the action's tasks, not
// one a replica. The batch's attempts all SUCCEEDED, and a success moves a
// job's phase only when it is the last live task's (Iris's
// _compute_job_state), so the phases the earlier attempts would derive are
// the action's own. A settle that moves an action another attempt of the
// batch still waits on returns errSettleAlone all the same.
//
// An attempt whose settle writes nothing but its task's outcome (an alone
// settle, or a replica's whose action a later attempt derives: defers)
// leaves that write for one statement with the others'
// (store.UpdateTaskOutcomes), made before the next settle that writes or
// reads anything else, and at the end: every statement a settle makes
// then sees the outcomes of the batch's attempts before it, as when each
// was written in turn, and the events keep their order. A batch of 100
// replicas' successes so writes 99 of its tasks in one statement.
func (s *Scheduler) settleAll(ctx context.Context, tx *store.Store, claimed []store.AttemptOwners, evs []Evaluation,
	now time.Time) error {
	var deferred []store.OutcomeWrite
	for i, o := range claimed {
		later := slices.ContainsFunc(claimed[i+1:], func(n store.AttemptOwners) bool { return keyOf(n.Action) == keyOf(o.Action) })
		evs[i].deriveLater = later
		if defers(o, later) {
			evs[i].outcomes = &deferred
		} else {
			if err := tx.Tasks().UpdateTaskOutcomes(ctx, now, deferred...); err != nil {
				return fmt.Errorf("update outcomes of %d tasks: %w", len(deferred), err)
			}
			deferred = deferred[:0]
		}
		if err := s.settle(ctx, tx, &evs[i], o.Action, o.Task, o.Attempt, false, now); err != nil {
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

// defers reports whether the settle of a claimed SUCCEEDED attempt writes
// nothing but its task's outcome: it settles alone (aloneSettles), or its
// task is one of several of the action (not Evaluation.only), the latest
// attempt of a live task, the step caches nothing, and a later attempt of
// the batch derives the action's phase (later).
func defers(o store.AttemptOwners, later bool) bool {
	t, a, act := o.Task, o.Attempt, o.Action
	only := act.Spec.ReplicaCount() == 1 && t.Generation == act.Generation
	return aloneSettles(o) || later && !only && t.State.IsLive() && t.State != domain.TaskKilled &&
		t.AttemptCount == a.Number && act.Spec.Cache == nil
}

// aloneSettles reports whether the settle of a claimed SUCCEEDED attempt
// writes nothing but its task's outcome, which then carries its action's
// move: the attempt is its live task's latest, the task its action's only
// one (Evaluation.only) and not coscheduled, and the step caches nothing
// (finalizeCache). The action's phase then comes from that task's state
// alone, with no count of its tasks to read the write back.
func aloneSettles(o store.AttemptOwners) bool {
	t, a, act := o.Task, o.Attempt, o.Action
	return t.State.IsLive() && t.State != domain.TaskKilled && t.AttemptCount == a.Number && !t.Coscheduled &&
		act.Spec.ReplicaCount() == 1 && t.Generation == act.Generation && act.Spec.Cache == nil
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
		adv, err := s.progressFrom(ctx, tx, run, known, &later, nil, now)
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
