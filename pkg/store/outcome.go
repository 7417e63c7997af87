package store

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// TaskOutcome is what an evaluation decided for a task: its counters, and
// either a requeue to PENDING or its end in State.
type TaskOutcome struct {
	Budget domain.Budget
	// Code, when set, is the error code the decision gives the attempt
	// (e.g. domain.CodeMaxSystemFailuresExceeded).
	Code string
	// Requeue puts the task back to PENDING, placeable from NotBefore.
	Requeue   bool
	NotBefore time.Time
	// State is the task's final state when it does not requeue.
	State domain.TaskState
	// Result names the decision for the event ("task.<Result>").
	Result string
	// Phase, when set, moves the task's action in the same statement, as
	// SetActionPhase would: the task is its action's only one, so its
	// outcome alone decides the action's phase.
	Phase *PhaseMove
}

// PhaseMove is an action's move from phase From to phase To.
type PhaseMove struct{ From, To domain.Phase }

// updateTaskOutcomeSQL writes a task's outcome and, when @move, its
// action's phase (forward from @from only), in one statement; it returns
// whether the action moved.
const updateTaskOutcomeSQL = `WITH a AS (UPDATE actions SET phase = @to, updated_at = @now, version = version + 1,
	  ended_at = CASE WHEN @terminal THEN @now ELSE ended_at END
	  WHERE @move AND project = @p AND domain = @d AND run_name = @r AND name = @n AND phase = @from RETURNING 1)
	UPDATE tasks SET failure_count = @failures, preemption_count = @preemptions, system_failure_count = @system_failures,
	  updated_at = @now, version = version + 1, state = @state,
	  worker_id = CASE WHEN @requeue THEN NULL ELSE worker_id END,
	  not_before = CASE WHEN @requeue THEN @not_before ELSE not_before END,
	  ended_at = CASE WHEN @requeue THEN ended_at ELSE @now END
	WHERE id = @id RETURNING (SELECT count(*) FROM a)`

// UpdateTaskOutcome writes an evaluation's decision on task t, the one of
// attempt a (claimed, so locked), and o.Phase's move of its action (locked
// too) when set, in one statement; then o.Code on the attempt when set. It
// writes a "task.<Result>" event (data: attempt_state, not_before, and code
// with the attempt's former code when o.Code is set), then the action's
// "action.phase" event when it moved.
func (s *Store) UpdateTaskOutcome(ctx context.Context, t Task, a Attempt, o TaskOutcome, now time.Time) error {
	args := map[string]any{"id": t.ID, "failures": o.Budget.FailureCount, "preemptions": o.Budget.PreemptionCount,
		"system_failures": o.Budget.SystemFailureCount, "now": now, "state": o.State, "requeue": o.Requeue,
		"not_before": nil, "move": o.Phase != nil, "from": "", "to": "", "terminal": false,
		"p": t.Project, "d": t.Domain, "r": t.RunName, "n": t.ActionName}
	data := map[string]any{"attempt_state": a.State.String(), "not_before": nil}
	if o.Requeue {
		args["state"], args["not_before"], data["not_before"] = domain.TaskPending, o.NotBefore, o.NotBefore
	}
	if o.Phase != nil {
		args["from"], args["to"], args["terminal"] = string(o.Phase.From), string(o.Phase.To), o.Phase.To.IsTerminal()
	}
	var moved []int
	if err := s.q(ctx).Raw(updateTaskOutcomeSQL, args).Scan(&moved).Error; err != nil {
		return mapErr(err)
	}
	if o.Code != "" {
		data["code"], data["attempt_code"] = o.Code, a.Code
		if err := s.setAttemptCode(ctx, a.ID, o.Code, now); err != nil {
			return err
		}
	}
	if err := s.taskEvent(ctx, t, a.ID, "task."+o.Result, data); err != nil || len(moved) == 0 || moved[0] == 0 {
		return err
	}
	key := domain.RunKey{Project: t.Project, Domain: t.Domain, Run: t.RunName}
	return s.event(ctx, key, t.ActionName, "action.phase", map[string]any{"from": o.Phase.From, "to": o.Phase.To})
}
