package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// WorkflowConfig tunes KubeVela's workflow rules.
type WorkflowConfig struct {
	// MaxStepRetries is how many failed retries of an on_failure: suspend
	// step are made before the run pauses. Default 10 (KubeVela's
	// --max-workflow-step-error-retry-times).
	MaxStepRetries int
	// FailedBackoffCap caps the backoff before a failed step's retry.
	// Default 300s (KubeVela's --max-workflow-failed-backoff-time).
	FailedBackoffCap time.Duration
	// WaitBackoffCap caps the backoff of a step re-checking a condition:
	// a step waiting for its target (WAITING), a cache wait. Default 60s
	// (KubeVela's --max-workflow-wait-backoff-time).
	WaitBackoffCap time.Duration
	// OnFailure is the failure policy of a step whose spec gives no
	// on_failure: domain.OnFailureFail (the default) or
	// domain.OnFailureSuspend (KubeVela's retry-then-suspend, which
	// KubeVela applies to every step).
	OnFailure string
}

func (c *WorkflowConfig) defaults() {
	c.OnFailure = cmp.Or(c.OnFailure, domain.OnFailureFail)
	c.MaxStepRetries = cmp.Or(c.MaxStepRetries, domain.KubeVelaMaxRetries)
	c.FailedBackoffCap = cmp.Or(c.FailedBackoffCap, domain.KubeVelaFailedCap)
	c.WaitBackoffCap = cmp.Or(c.WaitBackoffCap, domain.KubeVelaWaitCap)
}

// resolveWaits ends the waits of a run's steps that are over, in place in
// steps: a suspend's duration that passed and a resume after a step paused
// (SUCCEEDED), an approval decided (SUCCEEDED, or FAILED with reason
// rejected), a retry's backoff that passed and a resume of a step paused
// after its retries (its next generation starts). It returns the steps whose
// new tasks it created.
func (s *Scheduler) resolveWaits(ctx context.Context, tx *store.Store, run store.Run, steps []store.Action,
	adv *Advance, now time.Time) ([]string, error) {
	var started []string
	for i := range steps {
		a := &steps[i]
		if a.WaitingFor == nil || domain.Phase(a.Phase).IsTerminal() {
			continue
		}
		if *a.WaitingFor == store.WaitCache {
			if err := s.holdCacheWait(ctx, tx, run, *a, now); err != nil {
				return started, fmt.Errorf("hold cache wait of step %s: %w", a.Name, err)
			}
			continue // progression re-checks it: it has not started
		}
		to, reason, retry := waitOutcome(run, *a, now)
		var err error
		switch {
		case retry:
			failed := a.FailedTimes
			if *a.WaitingFor == store.WaitResume {
				failed = 0 // a resume retries with a fresh count
			}
			err = s.retryStep(ctx, tx, run, a, failed, adv, now)
			started = append(started, a.Name)
		case to != "":
			err = tx.Actions().EndWait(ctx, keyOf(*a), domain.Phase(a.Phase), to, reason, now)
			a.Phase, a.WaitingFor = string(to), nil
		}
		if err != nil {
			return started, fmt.Errorf("end wait of step %s: %w", a.Name, err)
		}
	}
	return started, nil
}

// waitOutcome decides how a step's wait ends now: in phase to (with a
// reason), by a retry of the step, or not yet ("", false).
func waitOutcome(run store.Run, a store.Action, now time.Time) (to domain.Phase, reason string, retry bool) {
	due := a.NotBefore != nil && !now.Before(*a.NotBefore)
	resumed := run.ResumeRequestedAt != nil && a.PausedAt != nil && !run.ResumeRequestedAt.Before(*a.PausedAt)
	switch *a.WaitingFor {
	case store.WaitDuration:
		if due || resumed {
			return domain.PhaseSucceeded, "", false
		}
	case store.WaitApproval:
		if to, reason, ended := domain.ApprovalOutcome(a.Decision); ended {
			return to, reason, false
		}
	case store.WaitResume:
		if resumed && (a.Spec.Kind == domain.KindTask || a.Spec.Kind == domain.KindWorkflow) {
			return "", "", true
		}
		if resumed {
			return domain.PhaseSucceeded, "", false
		}
	case store.WaitRetry:
		return "", "", due
	}
	return "", "", false
}

// retryStep starts a step's next generation of tasks, or of child runs for
// a workflow step (startChildStep, whose starts adv carries) (KubeVela
// retries a failed step as a whole; the old tasks and attempts, or child
// runs, stay as history; a for_each reruns its failed items,
// retryForEach). The step keeps its first start, so its timeout counts
// across retries.
func (s *Scheduler) retryStep(ctx context.Context, tx *store.Store, run store.Run, a *store.Action, failedTimes int,
	adv *Advance, now time.Time) error {
	key := keyOf(*a)
	if err := tx.Actions().RetryStep(ctx, key, domain.Phase(a.Phase), a.Generation+1, failedTimes, now); err != nil {
		return fmt.Errorf("retry as generation %d: %w", a.Generation+1, err)
	}
	a.Generation, a.FailedTimes, a.Phase, a.WaitingFor = a.Generation+1, failedTimes, string(domain.PhaseRunning), nil
	if a.Spec.Kind == domain.KindWorkflow {
		ended, err := s.startChildStep(ctx, tx, run, *a, adv, now)
		if ended != "" {
			a.Phase = string(ended)
		}
		return err
	}
	if a.Spec.ForEach != nil {
		return s.retryForEach(ctx, tx, run, a, now)
	}
	if err := tx.Tasks().InsertTasks(ctx, s.newTasks(key, a.Spec, a.Generation, run.Params, now)); err != nil {
		return fmt.Errorf("insert tasks of generation %d: %w", a.Generation, err)
	}
	return nil
}

// failStep applies a step's failure policy (its on_failure, else
// WorkflowConfig.OnFailure) once its job FAILED: with suspend (KubeVela's
// retry-then-suspend) it waits for a retry after KubeVela's backoff while
// failed retries remain (RUNNING), else it pauses until a resume (PAUSED);
// it returns the phase the step is in, or "" when the policy is fail and
// the FAILED phase applies.
func (s *Scheduler) failStep(ctx context.Context, tx *store.Store, act store.Action, now time.Time) (domain.Phase, error) {
	if cmp.Or(act.Spec.OnFailure, s.cfg.Workflow.OnFailure) != domain.OnFailureSuspend {
		return "", nil
	}
	key, n := keyOf(act), act.FailedTimes+1
	cfg := s.cfg.Workflow
	if n <= cfg.MaxStepRetries {
		delay := domain.KubeVela{Cap: cfg.FailedBackoffCap}.Delay(n)
		if err := tx.Actions().WaitForRetry(ctx, key, n, now.Add(delay), now); err != nil {
			return domain.Phase(act.Phase), fmt.Errorf("wait for retry %d of %s: %w", n, key, err)
		}
		return domain.Phase(act.Phase), nil
	}
	reason := fmt.Sprintf("failed %d times; a resume retries it", n)
	if err := tx.Actions().PauseStep(ctx, key, domain.Phase(act.Phase), n, reason, now); err != nil {
		return domain.PhasePaused, fmt.Errorf("pause %s after %d failures: %w", key, n, err)
	}
	return domain.PhasePaused, nil
}

// restart applies a run's pending restart (`argo retry`-like): the steps
// domain.RestartSteps names start over under their next generation, and the
// run and a0 go back to RUNNING. run is updated in place.
func (s *Scheduler) restart(ctx context.Context, tx *store.Store, run *store.Run, now time.Time) error {
	key := domain.RunKey{Project: run.Project, Domain: run.Domain, Run: run.Name}
	steps, err := tx.Actions().StepActions(ctx, key)
	if err != nil {
		return fmt.Errorf("read steps to restart: %w", err)
	}
	status := make(map[string]domain.StepStatus, len(steps))
	for _, a := range steps {
		status[a.Name] = domain.StepStatus{Started: a.StartedAt != nil, Phase: domain.Phase(a.Phase)}
	}
	from := ""
	if run.RestartFrom != nil {
		from = *run.RestartFrom
	}
	names := domain.RestartSteps(run.Spec, status, from)
	if err := tx.Actions().ResetSteps(ctx, key, names, now); err != nil {
		return fmt.Errorf("reset %d steps to restart: %w", len(names), err)
	}
	if err := tx.Runs().ReopenRun(ctx, key, domain.Phase(run.Phase), names, now); err != nil {
		return fmt.Errorf("reopen run from %s: %w", run.Phase, err)
	}
	run.Phase, run.RestartRequestedAt, run.RestartFrom, run.EndedAt = string(domain.PhaseRunning), nil, nil, nil
	return nil
}

// keyOf is an action's key.
func keyOf(a store.Action) domain.ActionKey {
	return domain.RunKey{Project: a.Project, Domain: a.Domain, Run: a.RunName}.Action(a.Name)
}
