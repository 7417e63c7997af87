package store

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
)

// Cleanup steps an executor reports with a stopped attempt's final report
// (CleanupStep.Step): the plugin's Abort, then its Finalize (Flyte's
// handleAbortAndFinalize).
const (
	CleanupAbort    = "abort"
	CleanupFinalize = "finalize"
)

// CleanupStep is one cleanup step of an attempt as it ran: Step
// (CleanupAbort or CleanupFinalize), when it completed, and the last
// failure before it did ("" for none).
type CleanupStep struct {
	Step  string
	At    time.Time
	Error string
}

// cleanupEvents appends one run_events row per cleanup step of attempt id
// of task t, in order: "plugin_abort" or "plugin_finalize", data {at,
// error}.
func (s *core) cleanupEvents(ctx context.Context, t Task, id int64, steps []CleanupStep) error {
	for _, c := range steps {
		data := map[string]any{"at": c.At.UTC(), "step": c.Step}
		if c.Error != "" {
			data["error"] = c.Error
		}
		if err := s.taskEvent(ctx, t, id, "plugin_"+c.Step, data); err != nil {
			return err
		}
	}
	return nil
}

// setAttemptCode sets an attempt's code. The caller holds its lock.
func (s *core) setAttemptCode(ctx context.Context, id int64, code string, now time.Time) error {
	return mapErr(s.q(ctx).Model(&Attempt{}).Where("id = ?", id).
		Updates(map[string]any{"code": code, "updated_at": now}).Error)
}

// SetActionReason records why an action ended (e.g. an error code such as
// domain.CodeMaxSystemFailuresExceeded) and bumps its version; the caller
// holds the action's lock and writes the phase change's event in the same
// transaction.
func (s Actions) SetActionReason(ctx context.Context, key domain.ActionKey, reason string, now time.Time) error {
	return mapErr(s.q(ctx).Model(&Action{}).Where("project = ? AND domain = ? AND run_name = ? AND name = ?",
		key.Project, key.Domain, key.Run, key.Action).
		Updates(map[string]any{"reason": reason, "updated_at": now, "version": gorm.Expr("version + 1")}).Error)
}

// AbortSettled reports whether every attempt of an aborted action's tasks
// has ended and been evaluated, except attempt id (the one being
// evaluated): then its abort is complete.
func (s Actions) AbortSettled(ctx context.Context, key domain.ActionKey, id int64) (bool, error) {
	var n int64
	err := s.raw(ctx, `SELECT count(*) FROM attempts at JOIN tasks t ON t.id = at.task_id
		WHERE t.project = ? AND t.domain = ? AND t.run_name = ? AND t.action_name = ? AND at.id <> ?
		AND (at.state IN `+sqlLive+` OR (at.finished_at IS NOT NULL AND at.evaluated_at IS NULL))`,
		key.Project, key.Domain, key.Run, key.Action, id).Scan(&n).Error
	return n == 0, mapErr(err)
}

// WriteActionAborted appends the "action.aborted" event (data {phase},
// naming attempt attemptID, the last to stop) of an aborted action (phase
// ABORTED or TIMED_OUT) whose attempts have all stopped: the
// last step of its finalization, after the plugin's Abort and Finalize
// (reported with the attempts) and anything the evaluation released
// before it.
func (s Actions) WriteActionAborted(ctx context.Context, key domain.ActionKey, phase domain.Phase, attemptID int64) error {
	return s.eventFull(ctx, RunEvent{Project: key.Project, Domain: key.Domain, RunName: key.Run,
		ActionName: &key.Action, AttemptID: &attemptID, Type: "action.aborted"}, map[string]any{"phase": phase})
}
