package store

import (
	"context"
	"errors"
	"fmt"
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
	// Wait is the task's run of waits after the outcome: the zero Wait
	// ends it. With a requeue and a Count, WaitReason is the answer waited
	// on, the task's pending_reason.
	Wait       domain.Wait
	WaitReason string
}

// waitArgs returns the wait columns' values of o: wait_count,
// waiting_since and pending_reason (nil unless o requeues a wait).
func (o TaskOutcome) waitArgs() (int, *time.Time, *string) {
	if o.Wait.Count == 0 {
		return 0, nil, nil
	}
	var reason *string
	if o.Requeue {
		reason = &o.WaitReason
	}
	return o.Wait.Count, o.Wait.Since, reason
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
	  wait_count = @wait_count, waiting_since = @waiting_since, pending_reason = @pending_reason,
	  updated_at = @now, version = version + 1, state = @state,
	  worker_id = CASE WHEN @requeue THEN NULL ELSE worker_id END,
	  not_before = CASE WHEN @requeue THEN @not_before ELSE not_before END,
	  ended_at = CASE WHEN @requeue THEN ended_at ELSE @now END
	WHERE id = @id RETURNING (SELECT count(*) FROM a)`

// UpdateTaskOutcome writes an evaluation's decision on task t, the one of
// attempt a (claimed, so locked), and o.Phase's move of its action (locked
// too) when set, in one statement; then o.Code on the attempt when set. The
// task's run of waits becomes o.Wait, and its pending_reason o.WaitReason
// when it requeues a wait (else none: the task was placed). It writes a
// "task.<Result>" event (data: attempt_state, not_before, wait and reason
// for a wait, and code with the attempt's former code when o.Code is set),
// then the action's "action.phase" event when it moved.
func (s Tasks) UpdateTaskOutcome(ctx context.Context, t Task, a Attempt, o TaskOutcome, now time.Time) error {
	waits, since, reason := o.waitArgs()
	args := map[string]any{"id": t.ID, "failures": o.Budget.FailureCount, "preemptions": o.Budget.PreemptionCount,
		"system_failures": o.Budget.SystemFailureCount, "now": now, "state": o.State, "requeue": o.Requeue,
		"not_before": nil, "move": o.Phase != nil, "from": "", "to": "", "terminal": false,
		"p": t.Project, "d": t.Domain, "r": t.RunName, "n": t.ActionName,
		"wait_count": waits, "waiting_since": since, "pending_reason": reason}
	data := map[string]any{"attempt_state": a.State.String(), "not_before": nil}
	if reason != nil {
		data["wait"], data["reason"] = waits, *reason
	}
	if o.Requeue {
		args["state"], args["not_before"], data["not_before"] = domain.TaskPending, o.NotBefore, o.NotBefore
	}
	if o.Phase != nil {
		args["from"], args["to"], args["terminal"] = string(o.Phase.From), string(o.Phase.To), o.Phase.To.IsTerminal()
	}
	var moved []int
	if err := s.raw(ctx, updateTaskOutcomeSQL, args).Scan(&moved).Error; err != nil {
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

// OutcomeWrite is one task's outcome for UpdateTaskOutcomes: task T, the
// one of attempt A, and what the evaluation decided (O).
type OutcomeWrite struct {
	T Task
	A Attempt
	O TaskOutcome
}

// UpdateTaskOutcomes writes the outcomes of several tasks as
// UpdateTaskOutcome writes one (each ends its task's run of waits), in one
// statement: the tasks, and the actions of those with a Phase move; then
// the events, in ws's order, each task's "task.<Result>" then its action's
// "action.phase" when it moved. It takes only outcomes that end their task
// without a Code (an evaluation's successes): the caller holds the locks of
// every task and action written. Errors: ErrBadOutcome for an outcome with
// Requeue, a Code or a Wait (UpdateTaskOutcome writes those); Postgres's.
// No outcomes: nothing.
func (s Tasks) UpdateTaskOutcomes(ctx context.Context, now time.Time, ws ...OutcomeWrite) error {
	if len(ws) == 0 {
		return nil
	}
	args, err := outcomeArrays(ws)
	if err != nil {
		return err
	}
	args["now"] = now
	rows, err := s.raw(ctx, updateTaskOutcomesSQL, args).Rows()
	if err != nil {
		return mapErr(err)
	}
	moved := map[int64]bool{}
	for rows.Next() {
		var id int64
		var m bool
		if err := rows.Scan(&id, &m); err != nil {
			rows.Close()
			return mapErr(err)
		}
		moved[id] = m
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return mapErr(err)
	}
	for _, w := range ws {
		data := map[string]any{"attempt_state": w.A.State.String(), "not_before": nil}
		if err := s.taskEvent(ctx, w.T, w.A.ID, "task."+w.O.Result, data); err != nil {
			return err
		}
		if moved[w.T.ID] {
			key := domain.RunKey{Project: w.T.Project, Domain: w.T.Domain, Run: w.T.RunName}
			if err := s.event(ctx, key, w.T.ActionName, "action.phase",
				map[string]any{"from": w.O.Phase.From, "to": w.O.Phase.To}); err != nil {
				return err
			}
		}
	}
	return nil
}

// outcomeArrays returns updateTaskOutcomesSQL's arrays for ws, one element
// a write: ErrBadOutcome for an outcome that requeues or has a code.
func outcomeArrays(ws []OutcomeWrite) (map[string]any, error) {
	ids, failures, preemptions, systemFailures, states := make([]int64, len(ws)), make([]int64, len(ws)),
		make([]int64, len(ws)), make([]int64, len(ws)), make([]int64, len(ws))
	from, to, terminal, p, d, r, n := make(Strings, len(ws)), make(Strings, len(ws)), make(Strings, len(ws)),
		make(Strings, len(ws)), make(Strings, len(ws)), make(Strings, len(ws)), make(Strings, len(ws))
	for i, w := range ws {
		if w.O.Requeue || w.O.Code != "" || w.O.Wait.Count > 0 {
			return nil, fmt.Errorf("%w: task %d requeues, waits or has a code", ErrBadOutcome, w.T.ID)
		}
		ids[i], failures[i], preemptions[i] = w.T.ID, int64(w.O.Budget.FailureCount), int64(w.O.Budget.PreemptionCount)
		systemFailures[i], states[i] = int64(w.O.Budget.SystemFailureCount), int64(w.O.State)
		p[i], d[i], r[i], n[i], terminal[i] = w.T.Project, w.T.Domain, w.T.RunName, w.T.ActionName, "f"
		if w.O.Phase != nil {
			from[i], to[i] = string(w.O.Phase.From), string(w.O.Phase.To)
			if w.O.Phase.To.IsTerminal() {
				terminal[i] = "t"
			}
		}
	}
	return map[string]any{"ids": array(ids), "failures": array(failures),
		"preemptions": array(preemptions), "system_failures": array(systemFailures),
		"states": array(states), "from": from, "to": to, "terminal": terminal, "p": p, "d": d, "r": r, "n": n}, nil
}

// ErrBadOutcome: UpdateTaskOutcomes was given an outcome it does not write.
var ErrBadOutcome = errors.New("outcome not for UpdateTaskOutcomes")

// updateTaskOutcomesSQL is UpdateTaskOutcomes's statement: the rows come
// as arrays (unnest), which Postgres estimates by their length when it
// plans them and reads the tasks and actions by key; a move is a row
// whose @to is not empty, made from @from only.
const updateTaskOutcomesSQL = `WITH v AS (SELECT * FROM unnest(CAST(@ids AS bigint[]),
		CAST(@failures AS int[]), CAST(@preemptions AS int[]),
		CAST(@system_failures AS int[]), CAST(@states AS smallint[]),
		CAST(CAST(@from AS text) AS text[]), CAST(CAST(@to AS text) AS text[]), CAST(CAST(@terminal AS text) AS bool[]),
		CAST(CAST(@p AS text) AS text[]), CAST(CAST(@d AS text) AS text[]), CAST(CAST(@r AS text) AS text[]),
		CAST(CAST(@n AS text) AS text[]))
	AS v(id, failures, preemptions, system_failures, state, mfrom, mto, terminal, p, d, r, n)),
a AS (UPDATE actions x SET phase = v.mto, updated_at = @now, version = x.version + 1,
		ended_at = CASE WHEN v.terminal THEN @now ELSE x.ended_at END
	FROM v WHERE v.mto <> '' AND x.project = v.p AND x.domain = v.d AND x.run_name = v.r AND x.name = v.n
		AND x.phase = v.mfrom
	RETURNING v.id)
UPDATE tasks t SET failure_count = v.failures, preemption_count = v.preemptions,
	system_failure_count = v.system_failures, wait_count = 0, waiting_since = NULL,
	updated_at = @now, version = t.version + 1, state = v.state, ended_at = @now
FROM v WHERE t.id = v.id RETURNING t.id, t.id IN (SELECT id FROM a)`
