package store

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
)

// Waits, step retries and restarts: the statements the scheduler's
// workflow decisions (KubeVela's suspend, approval and retry-then-suspend,
// `argo retry`-like restarts) apply. Each writes its run_events rows.

// actionWhere is the WHERE clause of one action by key.
const actionWhere = "project = ? AND domain = ? AND run_name = ? AND name = ?"

func actionArgs(key domain.ActionKey) []any {
	return []any{key.Project, key.Domain, key.Run, key.Action}
}

// StartWait starts a waiting step (a suspend or an approval): it becomes
// PAUSED, started at now, waiting for waitingFor, until notBefore when that
// is set.
func (s Actions) StartWait(ctx context.Context, key domain.ActionKey, waitingFor string, notBefore *time.Time,
	now time.Time) error {
	err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(map[string]any{
		"phase": string(domain.PhasePaused), "started_at": now, "paused_at": now, "waiting_for": waitingFor,
		"not_before": notBefore, "updated_at": now, "version": gorm.Expr("version + 1")}).Error
	if err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.waiting", map[string]any{"for": waitingFor,
		"not_before": notBefore, "from": domain.PhaseQueued, "to": domain.PhasePaused})
}

// EndWait ends a waiting step in phase to (SUCCEEDED, or FAILED with a
// reason), clearing its wait.
func (s Actions) EndWait(ctx context.Context, key domain.ActionKey, from, to domain.Phase, reason string, now time.Time) error {
	up := map[string]any{"phase": string(to), "waiting_for": nil, "not_before": nil, "reason": strPtr(reason),
		"updated_at": now, "version": gorm.Expr("version + 1")}
	if to.IsTerminal() {
		up["ended_at"] = now
	}
	if err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(up).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.phase", map[string]any{"from": from, "to": to, "reason": reason})
}

// WaitForRetry records a failed step's retry (on_failure suspend): its
// failed_times becomes failedTimes and it waits, RUNNING, until notBefore.
func (s Actions) WaitForRetry(ctx context.Context, key domain.ActionKey, failedTimes int, notBefore, now time.Time) error {
	if err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(map[string]any{
		"failed_times": failedTimes, "waiting_for": WaitRetry, "not_before": notBefore, "updated_at": now,
		"version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.retry_scheduled",
		map[string]any{"step_retries": failedTimes, "not_before": notBefore})
}

// PauseStep pauses a step until a resume: phase PAUSED (from from), waiting
// for WaitResume, with failed_times and reason.
func (s Actions) PauseStep(ctx context.Context, key domain.ActionKey, from domain.Phase, failedTimes int, reason string,
	now time.Time) error {
	if err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(map[string]any{
		"phase": string(domain.PhasePaused), "failed_times": failedTimes, "waiting_for": WaitResume, "not_before": nil,
		"paused_at": now, "reason": reason, "updated_at": now, "version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.phase", map[string]any{"from": from,
		"to": domain.PhasePaused, "step_retries": failedTimes, "reason": reason})
}

// RetryStep starts a step's next generation: phase RUNNING, generation and
// failed_times as given, its wait cleared. The caller creates the
// generation's tasks.
func (s Actions) RetryStep(ctx context.Context, key domain.ActionKey, from domain.Phase, generation, failedTimes int,
	now time.Time) error {
	if err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(map[string]any{
		"phase": string(domain.PhaseRunning), "generation": generation, "failed_times": failedTimes,
		"waiting_for": nil, "not_before": nil, "paused_at": nil, "reason": nil, "updated_at": now,
		"version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.retried", map[string]any{"from": from,
		"to": domain.PhaseRunning, "generation": generation, "step_retries": failedTimes})
}

// ResetSteps puts the named steps of a run back as they were before they
// started, under their next generation (their tasks and attempts stay, as
// history), for a restart.
func (s Actions) ResetSteps(ctx context.Context, key domain.RunKey, names []string, now time.Time) error {
	if err := s.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND name IN ?",
		key.Project, key.Domain, key.Run, names).Updates(map[string]any{
		"phase": string(domain.PhaseQueued), "generation": gorm.Expr("generation + 1"), "started_at": nil,
		"ended_at": nil, "failed_times": 0, "waiting_for": nil, "not_before": nil, "paused_at": nil, "reason": nil,
		"decision": nil, "decided_by": nil, "decided_by_token_id": nil, "decided_by_token_name": nil, "decided_at": nil,
		"decision_comment": nil, "cache_key": nil,
		"cache_status": nil, "outputs": nil, "cache_waits": 0, "updated_at": now,
		"version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	return nil
}

// ReopenRun puts a restarted run and its a0 back to RUNNING (the one
// exception to forward-only phases, as `argo retry` does), clears the
// restart request and writes a "run.restarted" event naming the steps.
func (s Runs) ReopenRun(ctx context.Context, key domain.RunKey, from domain.Phase, steps []string, now time.Time) error {
	if err := s.q(ctx).Model(&Run{}).Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Run).
		Updates(map[string]any{"phase": string(domain.PhaseRunning), "ended_at": nil, "expires_at": nil, "restart_requested_at": nil,
			"restart_from": nil, "updated_at": now, "version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	if err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key.Action(domain.RootActionName))...).
		Updates(map[string]any{"phase": string(domain.PhaseRunning), "ended_at": nil, "updated_at": now,
			"version": gorm.Expr("version + 1")}).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key, domain.RootActionName, "run.restarted", map[string]any{"from": from,
		"to": domain.PhaseRunning, "steps": steps})
}

// SkipStep marks a step that will never run SKIPPED (from from), with why.
func (s Actions) SkipStep(ctx context.Context, key domain.ActionKey, from domain.Phase, reason string, now time.Time) error {
	return s.EndWait(ctx, key, from, domain.PhaseSkipped, reason, now)
}
