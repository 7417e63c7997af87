package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// newTasks returns the rows of a starting step's tasks of generation
// (domain.StepTasks), whose system-failure budget is the step's
// max_system_failures, else Config.MaxSystemFailures (Flyte's
// MaxSystemFailures). A step with a concurrency or rate limits has each
// task's keys evaluated over the run's params (domain.Step.TaskAdmissions,
// index = the task's, ITEM nil); a step without costs nothing more. A key
// that fails (the api checked every index when the run was created, so
// only a changed CEL library could) is the key "", logged.
func (s *Scheduler) newTasks(key domain.ActionKey, step domain.Step, generation int, params map[string]any,
	now time.Time) []store.Task {
	rows := store.NewTaskRows(key, generation, domain.StepTasks(step, *s.cfg.MaxSystemFailures, now))
	if !step.HasAdmission() {
		return rows
	}
	adm, errs := step.TaskAdmissions(params, len(rows), "step")
	if len(errs) > 0 {
		s.log.Warn("task admission key failed", "action", key.String(), "err", errs[0].Error())
	}
	return store.WithAdmission(rows, adm)
}

// outcome is what ended attempt a, as the retry rules read it: its state,
// its cause (system, permanent, waiting), whether it was still ASSIGNED
// when preempted, and whether it reached RUNNING (started_at set).
func outcome(a store.Attempt, wasAssigned bool) domain.AttemptOutcome {
	cause := deref(a.Cause)
	failed := a.State == domain.TaskFailed
	return domain.AttemptOutcome{State: a.State, System: cause == domain.CauseSystem, WasAssigned: wasAssigned,
		Started: a.StartedAt != nil, Permanent: failed && cause == domain.CausePermanent,
		Waiting: failed && cause == domain.CauseWaiting}
}

// failureCode is the code a terminal decision r on attempt a leaves for a
// user to see: the one the decision gives (MaxSystemFailuresExceeded), else
// the executor's (e.g. InvalidPluginSpec), else "".
func failureCode(a store.Attempt, o domain.AttemptOutcome, r domain.RetryResult) string {
	if r != domain.ExceededRetryLimit {
		return ""
	}
	own := ""
	if a.Code != nil {
		own = *a.Code
	}
	return cmp.Or(domain.FailureCode(o, r), own)
}

// finishAbort completes the abort of the action act once the last attempt
// of its killed tasks (a, claimed) has stopped: when act ended ABORTED or
// TIMED_OUT and no other attempt of it is live or unevaluated, it writes
// the action's "action.aborted" event — the last step of Flyte's
// handleAbortAndFinalize, after the plugin's Abort and Finalize (recorded
// with a's report). What the evaluation must release first (a cache
// reservation) goes just before the event, in this transaction.
func (s *Scheduler) finishAbort(ctx context.Context, tx *store.Store, act store.Action, a store.Attempt) error {
	phase := domain.Phase(act.Phase)
	if phase != domain.PhaseAborted && phase != domain.PhaseTimedOut {
		return nil
	}
	key := keyOf(act)
	settled, err := tx.Actions().AbortSettled(ctx, key, a.ID)
	if err != nil {
		return fmt.Errorf("check abort of %s settled: %w", key, err)
	}
	if !settled {
		return nil
	}
	if err := tx.Actions().WriteActionAborted(ctx, key, phase, a.ID); err != nil {
		return fmt.Errorf("write %s aborted: %w", key, err)
	}
	return nil
}
