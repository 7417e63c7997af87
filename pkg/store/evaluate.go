package store

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Evaluation is what EvaluateAttempt decided.
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
}

// EvaluateAttempt applies the outcome of a finished attempt to its task in one
// transaction: the retry budgets decide between a requeue to PENDING (after
// backoff.Delay of the charged counter) and a terminal state; the action's
// phase is then derived from its task counts. When the action FAILED (more
// FAILED tasks than max_task_failures), its unfinished tasks are KILLED and an
// abort is requested for their live attempts (Iris's
// _mark_remaining_tasks_killed). Idempotent: an evaluated attempt is skipped.
func (s *Store) EvaluateAttempt(ctx context.Context, attemptID int64, backoff domain.Backoff) (Evaluation, error) {
	var ev Evaluation
	err := s.InTx(ctx, func(tx *Store) error {
		// Claim the attempt: lock it and mark it evaluated in one statement.
		now := time.Now().UTC()
		var claimed []Attempt
		res := tx.q(ctx).Model(&claimed).Clauses(clause.Returning{}).
			Where("id = ? AND finished_at IS NOT NULL AND evaluated_at IS NULL", attemptID).
			Updates(map[string]any{"evaluated_at": now, "updated_at": now})
		if res.Error != nil {
			return mapErr(res.Error)
		}
		if len(claimed) == 0 { // evaluated already, not finished, or missing
			var n int64
			if err := tx.q(ctx).Model(&Attempt{}).Where("id = ?", attemptID).Count(&n).Error; err != nil {
				return mapErr(err)
			}
			if n == 0 {
				return ErrNotFound
			}
			return nil
		}
		a := claimed[0]
		return tx.evaluateClaimed(ctx, &ev, a, a.StartedAt == nil, backoff, now)
	})
	return ev, err
}

// evaluateClaimed is EvaluateAttempt on a finished attempt the caller locked
// and marked evaluated at now; wasAssigned tells whether it never started (a
// free preemption).
func (s *Store) evaluateClaimed(ctx context.Context, ev *Evaluation, a Attempt, wasAssigned bool, backoff domain.Backoff, now time.Time) error {
	var t Task
	if err := s.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Take(&t, a.TaskID).Error; err != nil {
		return mapErr(err)
	}
	ev.Done, ev.Run = true, domain.RunKey{Project: t.Project, Domain: t.Domain, Run: t.RunName}
	if !domain.TaskState(t.State).IsLive() || t.AttemptCount != a.Number {
		return nil // the task moved on: aborted, or superseded
	}
	if err := s.applyOutcome(ctx, ev, a, t, wasAssigned, backoff, now); err != nil {
		return err
	}
	return s.deriveAction(ctx, ev, ev.Run.Action(t.ActionName), now)
}

// applyOutcome updates the task from the attempt's outcome.
func (s *Store) applyOutcome(ctx context.Context, ev *Evaluation, a Attempt, t Task, wasAssigned bool, backoff domain.Backoff, now time.Time) error {
	b := domain.Budget{FailureCount: t.FailureCount, MaxRetriesFailure: t.MaxRetriesFailure,
		PreemptionCount: t.PreemptionCount, MaxRetriesPreemption: t.MaxRetriesPreemption,
		SystemFailureCount: t.SystemFailureCount, MaxSystemFailures: t.MaxSystemFailures}
	out := domain.AttemptOutcome{State: domain.TaskState(a.State), System: a.Cause != nil && *a.Cause == "system",
		WasAssigned: wasAssigned}
	nb, result := domain.HandleAttemptResult(b, out)
	ev.Result = result
	up := map[string]any{"failure_count": nb.FailureCount, "preemption_count": nb.PreemptionCount,
		"system_failure_count": nb.SystemFailureCount, "updated_at": now, "version": gorm.Expr("version + 1")}
	if result == domain.ShouldRetry {
		at := now.Add(backoff.Delay(retryNumber(b, nb)))
		ev.NotBefore = &at
		up["state"], up["worker_id"], up["not_before"] = int16(domain.TaskPending), nil, at
	} else {
		up["state"], up["ended_at"] = a.State, now
	}
	if err := s.q(ctx).Model(&Task{}).Where("id = ?", t.ID).Updates(up).Error; err != nil {
		return mapErr(err)
	}
	if t.Coscheduled && result == domain.ExceededRetryLimit {
		if err := s.cascadeGang(ctx, t, now); err != nil {
			return err
		}
	}
	return s.eventFull(ctx, RunEvent{Project: t.Project, Domain: t.Domain, RunName: t.RunName, ActionName: &t.ActionName,
		TaskID: &t.ID, AttemptID: &a.ID, Type: "task." + result.String()},
		map[string]any{"attempt_state": domain.TaskState(a.State).String(), "not_before": ev.NotBefore})
}

// cascadeGang exhausts the preemption budget of a coscheduled task's live
// siblings and makes them WORKER_FAILED (terminal), so no host hangs on a
// collective operation (Iris's _cascade_coscheduled_failure). Their processes
// are stopped by the abort the job's failure requests.
func (s *Store) cascadeGang(ctx context.Context, t Task, now time.Time) error {
	res := s.q(ctx).Model(&Task{}).Where("project = ? AND domain = ? AND run_name = ? AND action_name = ? AND id <> ? AND state IN ?",
		t.Project, t.Domain, t.RunName, t.ActionName, t.ID, liveStates).
		Updates(map[string]any{"state": int16(domain.TaskWorkerFailed), "preemption_count": gorm.Expr("max_retries_preemption + 1"),
			"ended_at": now, "updated_at": now, "version": gorm.Expr("version + 1")})
	if res.Error != nil || res.RowsAffected == 0 {
		return mapErr(res.Error)
	}
	return s.eventFull(ctx, RunEvent{Project: t.Project, Domain: t.Domain, RunName: t.RunName, ActionName: &t.ActionName,
		TaskID: &t.ID, Type: "action.gang_cascade"}, map[string]any{"siblings": res.RowsAffected})
}

// retryNumber returns the counter the outcome charged (the retry's number
// for backoff), or 1 for a free retry.
func retryNumber(before, after domain.Budget) int {
	switch {
	case after.FailureCount > before.FailureCount:
		return after.FailureCount
	case after.SystemFailureCount > before.SystemFailureCount:
		return after.SystemFailureCount
	case after.PreemptionCount > before.PreemptionCount:
		return after.PreemptionCount
	}
	return 1
}

// deriveAction recomputes an action's phase from its task counts (Iris's
// _compute_job_state) and applies it forward-only.
func (s *Store) deriveAction(ctx context.Context, ev *Evaluation, key domain.ActionKey, now time.Time) error {
	var act Action
	if err := s.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Where("project = ? AND domain = ? AND run_name = ? AND name = ?",
		key.Project, key.Domain, key.Run, key.Action).Take(&act).Error; err != nil {
		return mapErr(err)
	}
	var rows []struct {
		State int16
		N     int
	}
	if err := s.q(ctx).Model(&Task{}).Select("state, count(*) AS n").
		Where("project = ? AND domain = ? AND run_name = ? AND action_name = ?", key.Project, key.Domain, key.Run, key.Action).
		Group("state").Scan(&rows).Error; err != nil {
		return mapErr(err)
	}
	var step domain.Step
	_ = json.Unmarshal(act.Spec, &step)
	v := domain.JobView{Started: true, MaxTaskFailures: step.TaskFailuresAllowed()}
	for _, r := range rows {
		if int(r.State) < len(v.Counts) {
			v.Counts[r.State] = r.N
		}
	}
	ev.ActionPhase = domain.DeriveJobPhase(v)
	if err := s.setActionPhase(ctx, key, domain.Phase(act.Phase), ev.ActionPhase, now); err != nil {
		return err
	}
	if !ev.ActionPhase.IsTerminal() || ev.ActionPhase.IsSuccess() || domain.Phase(act.Phase).IsTerminal() {
		return nil
	}
	return s.killSurvivors(ctx, ev, key, "job "+strings.ToLower(string(ev.ActionPhase)), now)
}

// killSurvivors finalizes a job that ended in failure: its unfinished tasks
// become KILLED and, when any attempt of it is still live, an abort is
// requested so the reconciler stops those processes (Iris's
// _mark_remaining_tasks_killed and _finalize_terminal_job).
func (s *Store) killSurvivors(ctx context.Context, ev *Evaluation, key domain.ActionKey, reason string, now time.Time) error {
	res := s.q(ctx).Model(&Task{}).Where("project = ? AND domain = ? AND run_name = ? AND action_name = ? AND state IN ?",
		key.Project, key.Domain, key.Run, key.Action, []int16{int16(domain.TaskPending), int16(domain.TaskAssigned),
			int16(domain.TaskBuilding), int16(domain.TaskRunning)}).
		Updates(map[string]any{"state": int16(domain.TaskKilled), "ended_at": now, "updated_at": now,
			"version": gorm.Expr("version + 1")})
	if res.Error != nil {
		return mapErr(res.Error)
	}
	live, err := s.LiveAttemptsUnder(ctx, key)
	if err != nil || len(live) == 0 {
		return err
	}
	if err := s.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND name = ?",
		key.Project, key.Domain, key.Run, key.Action).
		Updates(map[string]any{"abort_requested_at": now, "abort_reason": reason,
			"abort_attempt_count": 0, "abort_outcome": nil}).Error; err != nil {
		return mapErr(err)
	}
	ev.AbortSurvivors = &key
	return s.event(ctx, key.RunKey, key.Action, "action.survivors_killed",
		map[string]any{"tasks": res.RowsAffected, "live_attempts": len(live), "reason": reason})
}

// PendingTasks returns up to limit PENDING tasks whose not_before has passed,
// highest priority band first, then oldest.
func (s *Store) PendingTasks(ctx context.Context, limit int) ([]Task, error) {
	var ts []Task
	err := s.q(ctx).Where("state IN " + sqlPending + " AND (not_before IS NULL OR not_before <= now())").
		Order("priority DESC, id").Limit(limit).Find(&ts).Error
	return ts, mapErr(err)
}

// NextPendingAt returns the earliest not_before of a PENDING task still in
// backoff, or nil.
func (s *Store) NextPendingAt(ctx context.Context) (*time.Time, error) {
	var at []time.Time
	err := s.q(ctx).Model(&Task{}).Where("state IN "+sqlPending+" AND not_before > now()").
		Order("not_before").Limit(1).Pluck("not_before", &at).Error
	if err != nil || len(at) == 0 {
		return nil, mapErr(err)
	}
	return &at[0], nil
}

// AssignTask binds a PENDING task to a worker and creates its next attempt
// (ASSIGNED), moving its action to RUNNING. ok is false when the task is no
// longer PENDING (aborted, or assigned by another pass). See AssignTasks.
func (s *Store) AssignTask(ctx context.Context, taskID int64, workerID string) (attempt Attempt, ok bool, err error) {
	as, err := s.AssignTasks(ctx, []Assignment{{TaskID: taskID, WorkerID: workerID}})
	if err != nil || len(as) == 0 {
		return Attempt{}, false, err
	}
	return as[0], true, nil
}

// UnfinishedRuns returns the keys of runs not yet terminal, oldest first.
func (s *Store) UnfinishedRuns(ctx context.Context, limit int) ([]domain.RunKey, error) {
	var rows []Run
	if err := s.q(ctx).Select("project, domain, name").Where("ended_at IS NULL").Order("created_at").Limit(limit).
		Find(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	keys := make([]domain.RunKey, len(rows))
	for i, r := range rows {
		keys[i] = domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Name}
	}
	return keys, nil
}

// UnevaluatedAttempts returns finished attempts whose outcome was not applied.
func (s *Store) UnevaluatedAttempts(ctx context.Context, limit int) ([]int64, error) {
	var ids []int64
	err := s.q(ctx).Model(&Attempt{}).Where("finished_at IS NOT NULL AND evaluated_at IS NULL").Order("id").
		Limit(limit).Pluck("id", &ids).Error
	return ids, mapErr(err)
}

// AssignedAttempts returns ASSIGNED attempts created before cutoff (their
// dispatch may have been lost with Redis), with their workers.
func (s *Store) AssignedAttempts(ctx context.Context, cutoff time.Time, limit int) ([]Attempt, error) {
	var as []Attempt
	err := s.q(ctx).Where("state IN "+sqlAssigned+" AND created_at < ?", cutoff).Order("id").
		Limit(limit).Find(&as).Error
	return as, mapErr(err)
}
