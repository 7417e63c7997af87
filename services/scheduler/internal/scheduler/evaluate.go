package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
)

// Evaluation is what applying a finished attempt decided.
type Evaluation struct {
	// Done is false when the attempt was already evaluated or not finished.
	Done   bool
	Run    domain.RunKey
	Result domain.RetryResult
	// NotBefore is when a retried task may be placed again.
	NotBefore *time.Time
	// ActionPhase is the task's action phase after the decision.
	ActionPhase domain.Phase
	// AbortSurvivors is set when the action failed and its surviving tasks
	// were killed: their live attempts must be stopped through the abort path.
	AbortSurvivors *domain.ActionKey
	// Code is the error code of a task that failed for good (e.g.
	// MaxSystemFailuresExceeded): the action's reason if it fails.
	Code string
	// Advance is what the run's advance did, when the action ended.
	Advance *Advance
	// Waiters are the runs with a step waiting on a cache key the action
	// released: their advance is pushed once committed.
	Waiters []domain.RunKey
	// taskState is the state decideTask gave the task.
	taskState domain.TaskState
}

// handleEvaluate is the task:evaluate handler.
func (s *Scheduler) handleEvaluate(ctx context.Context, t *asynq.Task) error {
	var p queue.AttemptPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	_, err := s.evaluate(ctx, p.AttemptID)
	return err
}

// handleEvaluations is the tasks:evaluate handler: the attempts one report
// batch ended, evaluated together in one transaction (evaluateAttempts).
// When that fails or cannot settle them together (errSettleAlone), each
// is evaluated on its own, in order (as task:evaluate). A missing attempt
// is skipped; any other failure fails the task, which asynq retries whole
// (an evaluated attempt is skipped then).
func (s *Scheduler) handleEvaluations(ctx context.Context, t *asynq.Task) error {
	var p queue.AttemptsPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	if len(p.AttemptIDs) == 1 {
		_, err := s.evaluate(ctx, p.AttemptIDs[0])
		return err
	}
	_, err := s.evaluateAttempts(ctx, p.AttemptIDs)
	if err == nil {
		return nil
	}
	s.log.Warn("batched evaluation failed; each attempt is evaluated on its own", "attempts", len(p.AttemptIDs), "err", err)
	var errs []error
	for _, id := range p.AttemptIDs {
		if _, err := s.evaluate(ctx, id); err != nil && !errors.Is(err, asynq.SkipRetry) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// evaluate evaluates one finished attempt: a batch of one
// (evaluateAttempts). A missing attempt is a permanent failure
// (asynq.SkipRetry); an attempt not finished, or evaluated already, gives
// an Evaluation that is not Done.
func (s *Scheduler) evaluate(ctx context.Context, attemptID int64) (Evaluation, error) {
	evs, err := s.evaluateAttempts(ctx, []int64{attemptID})
	if err != nil || len(evs) == 0 {
		return Evaluation{}, err
	}
	return evs[0], nil
}

// evaluateAttempts applies finished attempts to their tasks, and what
// follows, in one transaction (evaluateOnce), and acts on what it decided
// once committed (afterEvaluation). A platform failure first goes through
// ARC's rule for its worker (recordWorkerFailure), before its task may be
// placed again: the transaction that finds one rolls back, the rule is
// applied, and the evaluation runs again. Idempotent: an evaluated attempt
// is skipped. It returns the evaluations of the attempts it claimed.
func (s *Scheduler) evaluateAttempts(ctx context.Context, ids []int64) ([]Evaluation, error) {
	var recorded []int64
	var whole []domain.ActionKey
	evs, err := s.evaluateOnce(ctx, ids, recorded, whole)
	for {
		var first workerFailuresFirst
		var siblings siblingsFirst
		switch {
		case errors.As(err, &first):
			for _, id := range first.attempts {
				if err := s.recordWorkerFailure(ctx, id); err != nil {
					return nil, fmt.Errorf("%s: record worker failure of attempt %d: %w", evaluating(ids), id, err)
				}
			}
			recorded = append(recorded, first.attempts...)
		case errors.As(err, &siblings) && !slices.Contains(whole, siblings.action):
			whole = append(whole, siblings.action)
		default:
			if err != nil {
				return nil, fmt.Errorf("%s: %w", evaluating(ids), err)
			}
			for _, ev := range evs {
				s.metrics.evaluated.WithLabelValues(ev.Result.String()).Inc()
				s.afterEvaluation(ctx, ev)
			}
			return evs, nil
		}
		evs, err = s.evaluateOnce(ctx, ids, recorded, whole)
	}
}

// workerFailuresFirst: the attempts are platform failures whose workers
// have not been through ARC's rule in this evaluation yet.
type workerFailuresFirst struct{ attempts []int64 }

func (e workerFailuresFirst) Error() string {
	return fmt.Sprintf("the worker failures of attempts %v are recorded first", e.attempts)
}

// siblingsFirst: the evaluation ends the other unfinished tasks of action
// (a gang's cascade, a failed job's survivors) without holding their locks;
// taking them now could lock a task below one it holds. The transaction
// rolls back and runs again with the action's unfinished tasks locked with
// its own (store.LockAndClaimAttempts's whole).
type siblingsFirst struct{ action domain.ActionKey }

func (e siblingsFirst) Error() string {
	return fmt.Sprintf("the unfinished tasks of %s are locked first", e.action)
}

// evaluateOnce is evaluateAttempts' transaction: it locks the attempts'
// runs, actions and tasks (the lock order) and claims the attempts
// (store.LockAndClaimAttempts), then settles and advances them
// (decideAll). recorded are the attempts whose workers were through ARC's
// rule (else a platform failure returns workerFailuresFirst). A batch of
// one whose attempt is missing is asynq.SkipRetry.
func (s *Scheduler) evaluateOnce(ctx context.Context, ids, recorded []int64, whole []domain.ActionKey) ([]Evaluation, error) {
	var evs []Evaluation
	err := s.store.InTx(ctx, func(tx *store.Store) error {
		evs = nil
		now := s.now()
		claimed, err := tx.Attempts().LockAndClaimAttempts(ctx, ids, now, whole...)
		if err != nil {
			return fmt.Errorf("lock and claim attempts: %w", err)
		}
		if len(claimed) == 0 && len(ids) == 1 {
			if _, err := tx.Attempts().GetAttempt(ctx, ids[0]); errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("read attempt: %w: %w", err, asynq.SkipRetry)
			}
			return nil
		}
		var first []int64
		for _, o := range claimed {
			if platformFailure(o.Attempt) && !slices.Contains(recorded, o.Attempt.ID) {
				first = append(first, o.Attempt.ID)
			}
		}
		if len(first) > 0 {
			return workerFailuresFirst{first} // rolls the claims back
		}
		evs = make([]Evaluation, len(claimed))
		return s.decideAll(ctx, tx, claimed, evs, false, whole, now)
	})
	return evs, err
}

// settle applies the claimed attempt a to its task t (both locked with
// their action act in tx): the task's fate, the action's phase and the
// step's cache. wasAssigned is true when a was preempted while still
// ASSIGNED (free, Iris's preempt_task); w is how a batch has it write
// (settlement).
func (s *Scheduler) settle(ctx context.Context, tx *store.Store, ev *Evaluation, act store.Action, t store.Task,
	a store.Attempt, wasAssigned bool, w settlement, now time.Time) error {
	ev.Done, ev.Run = true, domain.RunKey{Project: t.Project, Domain: t.Domain, Run: t.RunName}
	if t.State == domain.TaskKilled && t.AttemptCount == a.Number {
		// The abort's last attempt stopped (Flyte's handleAbortAndFinalize:
		// the plugin's Abort and Finalize came with its report): release
		// the step's cache reservation, then write the ABORTED event.
		if err := s.finalizeCache(ctx, tx, ev, act, domain.Phase(act.Phase), now); err != nil {
			return err
		}
		return s.finishAbort(ctx, tx, act, a)
	}
	if !t.State.IsLive() || t.AttemptCount != a.Number {
		// The task moved on (superseded): an ended step whose last live
		// attempt this was releases its cache reservation.
		return s.finalizeCache(ctx, tx, ev, act, domain.Phase(act.Phase), now)
	}
	only := onlyTask(act, t)
	moved, err := s.decideTask(ctx, tx, ev, act, t, a, wasAssigned, w, now)
	if err != nil {
		return err
	}
	if w.deriveLater && !only {
		ev.ActionPhase = domain.Phase(act.Phase)
	} else if err := s.deriveAction(ctx, tx, ev, act, only || w.holds(keyOf(act)), only, moved, now); err != nil {
		return err
	}
	return s.finalizeCache(ctx, tx, ev, act, ev.ActionPhase, now)
}

// onlyTask reports whether t is its action's only task (a one-replica
// action that is no for_each, its current generation): the action's
// counts need no query.
func onlyTask(act store.Action, t store.Task) bool {
	return act.Spec.ForEach == nil && act.Spec.ReplicaCount() == 1 && t.Generation == act.Generation
}

// advances reports whether the run of an evaluated attempt advances: the
// action ended or paused (else the step runs on, and progression cannot
// change).
func (ev Evaluation) advances() bool {
	return ev.Done && (ev.ActionPhase.IsTerminal() || ev.ActionPhase == domain.PhasePaused)
}

// knownSteps returns the step actions of a run of one step, whose action
// act just ended in phase (terminal): progression needs no read of them.
// Else nil, for progress to read them.
func knownSteps(run store.Run, act store.Action, phase domain.Phase) []store.Action {
	if len(run.Spec.Steps) != 1 || act.Name != run.Spec.Steps[0].Name || !phase.IsTerminal() {
		return nil
	}
	act.Phase = string(phase)
	return []store.Action{act}
}

// decideTask applies Iris's handle_attempt_result to the task: the retry
// budgets decide between a requeue to PENDING (after the retry backoff of
// the charged counter) and a terminal state; a system failure is retried in
// place up to max_system_failures, past it the attempt gets the code
// MaxSystemFailuresExceeded, and a permanent one ends the task at once
// (Flyte's executor (TaskActionReconciler)); a waiting one is requeued
// after KubeVela's waiting backoff, charged to no budget, until its step's
// wait_timeout (decideWait); a coscheduled task that fails for good
// exhausts its live siblings (domain.CascadesGang). The only task of its
// action (onlyTask) moves the action in the same statement (onlyTaskMove),
// and moved reports that it did.
func (s *Scheduler) decideTask(ctx context.Context, tx *store.Store, ev *Evaluation, act store.Action, t store.Task,
	a store.Attempt, wasAssigned bool, w settlement, now time.Time) (moved bool, err error) {
	b := domain.Budget{FailureCount: t.FailureCount, MaxRetriesFailure: t.MaxRetriesFailure,
		PreemptionCount: t.PreemptionCount, MaxRetriesPreemption: t.MaxRetriesPreemption,
		SystemFailureCount: t.SystemFailureCount, MaxSystemFailures: t.MaxSystemFailures}
	out, err := s.outcomeOf(ctx, tx, act, a, wasAssigned)
	if err != nil {
		return false, err
	}
	nb, result := domain.HandleAttemptResult(b, out)
	o := store.TaskOutcome{Budget: nb, State: a.State}
	switch result {
	case domain.ShouldRetry:
		o.Requeue, o.NotBefore = true, now.Add(s.cfg.Retry.Delay(domain.RetryNumber(b, nb)))
	case domain.ShouldWait:
		result = s.decideWait(&o, act, t, a, now)
	}
	ev.Result, ev.Code = result, failureCode(a, out, result)
	o.Result, o.Code = result.String(), domain.FailureCode(out, result)
	ev.taskState = o.State
	if o.Requeue {
		ev.NotBefore, ev.taskState = &o.NotBefore, domain.TaskPending
	}
	if onlyTask(act, t) && !t.Coscheduled {
		o.Phase = onlyTaskMove(act, ev.taskState, result == domain.ShouldWait)
		moved = o.Phase != nil
	}
	if w.deferred != nil && !o.Requeue && o.Code == "" {
		*w.deferred = append(*w.deferred, store.OutcomeWrite{T: t, A: a, O: o})
	} else if err := tx.Tasks().UpdateTaskOutcome(ctx, t, a, o, now); err != nil {
		return moved, fmt.Errorf("update outcome of task %d: %w", t.ID, err)
	}
	if t.Coscheduled && domain.CascadesGang(a.State, result) {
		if !onlyTask(act, t) && !w.holds(keyOf(act)) {
			return moved, siblingsFirst{keyOf(act)}
		}
		if _, err := tx.Tasks().ExhaustGangSiblings(ctx, t, now); err != nil {
			return moved, fmt.Errorf("exhaust gang siblings of task %d: %w", t.ID, err)
		}
	}
	return moved, nil
}

// decideWait times the task of a waiting attempt a (domain.DecideWait, over
// its run of waits, the step's wait_timeout and the waiting cap) into o: a
// requeue after KubeVela's waiting backoff, with the answer waited on as
// the task's pending_reason; or, past wait_timeout, ExceededRetryLimit (the
// task ends FAILED, its run of waits too).
func (s *Scheduler) decideWait(o *store.TaskOutcome, act store.Action, t store.Task, a store.Attempt,
	now time.Time) domain.RetryResult {
	wait, r, notBefore := domain.DecideWait(domain.Wait{Count: t.WaitCount, Since: t.WaitingSince},
		domain.WaitPolicy{Timeout: act.Spec.WaitTimeoutDuration(), Cap: s.cfg.Workflow.WaitBackoffCap}, now)
	if r == domain.ShouldWait {
		o.Requeue, o.NotBefore, o.Wait = true, notBefore, wait
		o.WaitReason = "not ready: " + cmp.Or(deref(a.Error), "the target said to wait")
	}
	return r
}

// outcomeOf is outcome(a, wasAssigned) for the settle of a, the attempt of
// a task of act: an attempt whose executor lacks the step's plugin
// (CodePluginUnavailable, a system failure) is a permanent failure when no
// other alive worker runs the plugin (domain.PluginOffered): no placement
// can find it a worker. Reads workers (no lock).
func (s *Scheduler) outcomeOf(ctx context.Context, tx *store.Store, act store.Action, a store.Attempt,
	wasAssigned bool) (domain.AttemptOutcome, error) {
	out := outcome(a, wasAssigned)
	if !out.System || deref(a.Code) != domain.CodePluginUnavailable {
		return out, nil
	}
	labels, err := tx.Workers().AliveWorkerLabels(ctx, deref(a.WorkerID))
	if err != nil {
		return out, fmt.Errorf("read the labels of alive workers: %w", err)
	}
	if !domain.PluginOffered(act.Spec.Plugin, labels) {
		out.System, out.Permanent = false, true
	}
	return out, nil
}

// deriveAction recomputes an action's phase from its current generation's
// task counts (Iris's _compute_job_state, domain.DeriveJobPhase) and applies
// it forward-only; an action that newly ended in failure kills its
// survivors. A FAILED job first goes through its step's failure policy
// (failStep): under on_failure: suspend it waits for a retry or pauses
// instead of ending. only is onlyTask's answer; moved is set when the
// task's outcome carried the action's move (onlyTaskMove); held, that the
// transaction holds every unfinished task of the action (else a kill of
// survivors is siblingsFirst).
func (s *Scheduler) deriveAction(ctx context.Context, tx *store.Store, ev *Evaluation, act store.Action, held, only, moved bool,
	now time.Time) error {
	key := keyOf(act)
	counts := map[domain.TaskState]int{ev.taskState: 1}
	waiting := ev.Result == domain.ShouldWait
	if !only {
		var err error
		if counts, err = tx.Tasks().CountTaskStates(ctx, key, act.Generation); err != nil {
			return fmt.Errorf("count task states of %s generation %d: %w", key, act.Generation, err)
		}
		if waiting, err = s.othersWait(ctx, tx, key, act.Generation, counts, waiting); err != nil {
			return err
		}
	}
	from := domain.Phase(act.Phase)
	ev.ActionPhase = jobPhase(act, counts, waiting)
	if !domain.CanMovePhase(from, ev.ActionPhase) {
		ev.ActionPhase = from
		return nil
	}
	reason := "job " + strings.ToLower(string(ev.ActionPhase))
	if ev.ActionPhase == domain.PhaseFailed && act.WaitingFor == nil {
		phase, err := s.failStep(ctx, tx, act, now)
		if err != nil || phase != "" {
			ev.ActionPhase = cmp.Or(phase, ev.ActionPhase)
			return errors.Join(err, s.killSurvivors(ctx, tx, ev, key, held, reason, now))
		}
	}
	if !moved { // else the task's outcome carried this move (onlyTaskMove)
		if _, err := tx.Actions().SetActionPhase(ctx, key, from, ev.ActionPhase, now); err != nil {
			return fmt.Errorf("move %s from %s to %s: %w", key, from, ev.ActionPhase, err)
		}
	}
	if ev.ActionPhase == domain.PhaseFailed && ev.Code != "" {
		if err := tx.Actions().SetActionReason(ctx, key, ev.Code, now); err != nil {
			return fmt.Errorf("set reason %s of %s: %w", ev.Code, key, err)
		}
	}
	if !ev.ActionPhase.IsTerminal() || ev.ActionPhase.IsSuccess() {
		return nil
	}
	return s.killSurvivors(ctx, tx, ev, key, held, reason, now)
}

// othersWait reports whether a task of the action's generation waits for
// its target: waiting (the evaluated task does), else, when no task is live
// and some is PENDING (so the wait decides between WAITING and RUNNING), a
// count of them (store.CountWaitingTasks).
func (s *Scheduler) othersWait(ctx context.Context, tx *store.Store, key domain.ActionKey, generation int,
	counts map[domain.TaskState]int, waiting bool) (bool, error) {
	live := counts[domain.TaskAssigned] + counts[domain.TaskBuilding] + counts[domain.TaskRunning]
	if waiting || live > 0 || counts[domain.TaskPending] == 0 {
		return waiting, nil
	}
	n, err := tx.Tasks().CountWaitingTasks(ctx, key, generation)
	if err != nil {
		return false, fmt.Errorf("count waiting tasks of %s generation %d: %w", key, generation, err)
	}
	return n > 0, nil
}

// jobPhase derives an action's phase from its current generation's task
// counts (Iris's _compute_job_state, domain.DeriveJobPhase); waiting: a
// PENDING task waits for its target.
func jobPhase(act store.Action, counts map[domain.TaskState]int, waiting bool) domain.Phase {
	v := domain.JobView{Started: true, MaxTaskFailures: act.Spec.TaskFailuresAllowed(), Waiting: waiting}
	for st, n := range counts {
		if int(st) >= 0 && int(st) < len(v.Counts) {
			v.Counts[st] = n
		}
	}
	return domain.DeriveJobPhase(v)
}

// onlyTaskMove is the move of action act that its only task's new state
// (waiting: it waits for its target) decides, for the task's outcome to
// carry (store.TaskOutcome.Phase); nil when the action stays, or fails: a
// failed job first goes through its step's failure policy (deriveAction).
func onlyTaskMove(act store.Action, state domain.TaskState, waiting bool) *store.PhaseMove {
	from, to := domain.Phase(act.Phase), jobPhase(act, map[domain.TaskState]int{state: 1}, waiting)
	if !domain.CanMovePhase(from, to) || to == domain.PhaseFailed {
		return nil
	}
	return &store.PhaseMove{From: from, To: to}
}

// killSurvivors finalizes a job that ended in failure: its unfinished tasks
// become KILLED and, when any attempt of it is still live, an abort is
// requested so the reconciler stops those processes (Iris's
// _mark_remaining_tasks_killed and _finalize_terminal_job). held: the
// transaction holds every unfinished task of the action; else it returns
// siblingsFirst before locking any.
func (s *Scheduler) killSurvivors(ctx context.Context, tx *store.Store, ev *Evaluation, key domain.ActionKey,
	held bool, reason string, now time.Time) error {
	if !held {
		return siblingsFirst{key}
	}
	n, err := tx.Tasks().KillUnfinishedTasks(ctx, key, now)
	if err != nil {
		return fmt.Errorf("kill unfinished tasks of %s: %w", key, err)
	}
	live, err := tx.Aborts().LiveAttemptsUnder(ctx, key)
	if err != nil {
		return fmt.Errorf("read live attempts of %s: %w", key, err)
	}
	if len(live) == 0 {
		return nil
	}
	ev.AbortSurvivors = &key
	if err := tx.Actions().RequestActionAbort(ctx, key, reason, map[string]any{"tasks": n, "live_attempts": len(live), "reason": reason}); err != nil {
		return fmt.Errorf("request abort of %s: %w", key, err)
	}
	return nil
}

// afterEvaluation acts on what an evaluation decided, once committed: it
// pushes the abort of a failed job's survivors and kicks a pass: for the
// slot it freed when the leader's last pass left tasks to place, and
// whenever the evaluation may have left something for a pass to do or to
// time (see needsPass).
func (s *Scheduler) afterEvaluation(ctx context.Context, ev Evaluation) {
	if ev.AbortSurvivors != nil {
		s.enqueueAbort(ctx, *ev.AbortSurvivors)
	}
	if ev.Advance != nil {
		s.afterAdvance(ctx, *ev.Advance)
	}
	s.wakeCacheWaiters(ctx, ev.Waiters)
	if ev.needsPass() || !s.placedAll.Load() {
		s.Kick()
	}
}

// needsPass reports whether an evaluation may have left a pass something
// other than a freed slot: a task PENDING again (at once or after its
// backoff, whose end the pass's timer must know), survivors to stop, cache
// waiters, a run that went on (steps started, or waits whose ends the timer
// must know), or an attempt it did not evaluate. An evaluation that ended
// the attempt's task for good and, with it, nothing or its whole run, left
// none.
func (ev Evaluation) needsPass() bool {
	return !ev.Done || ev.taskState == domain.TaskPending || ev.NotBefore != nil || ev.AbortSurvivors != nil ||
		len(ev.Waiters) > 0 || ev.Advance != nil && (len(ev.Advance.Started) > 0 || !ev.Advance.Phase.IsTerminal())
}

// evaluating names an evaluation of ids for its errors.
func evaluating(ids []int64) string {
	if len(ids) == 1 {
		return fmt.Sprintf("evaluate attempt %d", ids[0])
	}
	return fmt.Sprintf("evaluate %d attempts", len(ids))
}
