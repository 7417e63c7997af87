package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
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
	// CountGeneration, when set, has the statement also count the tasks of
	// the action's generation *CountGeneration by state, as
	// CountTaskStates does (OutcomeReads.Counts).
	CountGeneration *int
	// ReadSteps has the statement also read the run's step actions, as
	// StepActions does (OutcomeReads.Steps).
	ReadSteps bool
}

// OutcomeReads is what UpdateTaskOutcome read in its statement, as the
// rows are once it wrote: the task's new state is in Counts and the
// action's move in Steps. Its statement follows the one that locked the
// run, the action and the task, so it saw every transaction that wrote
// them before the lock (each writer holds those locks).
type OutcomeReads struct {
	// Counts is the tasks of the generation asked for by state; nil when
	// not asked.
	Counts map[domain.TaskState]int
	// Steps is the run's step actions by name; nil when not asked.
	Steps []Action
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
	WHERE id = @id RETURNING (SELECT count(*) FROM a),
	  CASE WHEN @count THEN (SELECT coalesce(json_object_agg(c.state, c.n), '{}') FROM (SELECT state, count(*) AS n
	    FROM tasks WHERE project = @p AND domain = @d AND run_name = @r AND action_name = @n AND generation = @generation
	    GROUP BY state) c) END,
	  CASE WHEN @steps THEN (SELECT coalesce(json_agg(x ORDER BY x.name), '[]') FROM actions x
	    WHERE project = @p AND domain = @d AND run_name = @r AND name <> @root) END`

// UpdateTaskOutcome writes an evaluation's decision on task t, the one of
// attempt a (claimed, so locked), and o.Phase's move of its action (locked
// too) when set, in one statement, with the reads o asks for
// (OutcomeReads); then o.Code on the attempt when set. It writes a
// "task.<Result>" event (data: attempt_state, not_before, and code with the
// attempt's former code when o.Code is set), then the action's
// "action.phase" event when it moved.
func (s *Store) UpdateTaskOutcome(ctx context.Context, t Task, a Attempt, o TaskOutcome, now time.Time) (OutcomeReads, error) {
	args := map[string]any{"id": t.ID, "failures": o.Budget.FailureCount, "preemptions": o.Budget.PreemptionCount,
		"system_failures": o.Budget.SystemFailureCount, "now": now, "state": o.State, "requeue": o.Requeue,
		"not_before": nil, "move": o.Phase != nil, "from": "", "to": "", "terminal": false,
		"p": t.Project, "d": t.Domain, "r": t.RunName, "n": t.ActionName, "count": o.CountGeneration != nil,
		"generation": 0, "steps": o.ReadSteps, "root": domain.RootActionName}
	data := map[string]any{"attempt_state": a.State.String(), "not_before": nil}
	if o.Requeue {
		args["state"], args["not_before"], data["not_before"] = domain.TaskPending, o.NotBefore, o.NotBefore
	}
	if o.Phase != nil {
		args["from"], args["to"], args["terminal"] = string(o.Phase.From), string(o.Phase.To), o.Phase.To.IsTerminal()
	}
	if o.CountGeneration != nil {
		args["generation"] = *o.CountGeneration
	}
	var moved int
	var counts, steps []byte
	err := s.q(ctx).Raw(updateTaskOutcomeSQL, args).Row().Scan(&moved, &counts, &steps)
	if errors.Is(err, sql.ErrNoRows) {
		return OutcomeReads{}, ErrNotFound
	}
	if err != nil {
		return OutcomeReads{}, mapErr(err)
	}
	reads, err := outcomeReads(t, o, args["state"].(domain.TaskState), moved > 0, counts, steps)
	if err != nil {
		return reads, err
	}
	if o.Code != "" {
		data["code"], data["attempt_code"] = o.Code, a.Code
		if err := s.setAttemptCode(ctx, a.ID, o.Code, now); err != nil {
			return reads, err
		}
	}
	if err := s.taskEvent(ctx, t, a.ID, "task."+o.Result, data); err != nil || moved == 0 {
		return reads, err
	}
	key := domain.RunKey{Project: t.Project, Domain: t.Domain, Run: t.RunName}
	return reads, s.event(ctx, key, t.ActionName, "action.phase", map[string]any{"from": o.Phase.From, "to": o.Phase.To})
}

// outcomeReads decodes what updateTaskOutcomeSQL read (counts, steps: JSON,
// nil when not asked) and applies the statement's own writes, which its
// reads do not see: task t from its state to state, its action's move when
// moved.
func outcomeReads(t Task, o TaskOutcome, state domain.TaskState, moved bool, counts, steps []byte) (OutcomeReads, error) {
	var reads OutcomeReads
	if counts != nil {
		var byName map[string]int
		if err := decodeRows(counts, &byName); err != nil {
			return reads, fmt.Errorf("decode task counts: %w", err)
		}
		reads.Counts = make(map[domain.TaskState]int, len(byName)+1)
		for k, n := range byName {
			st, err := strconv.Atoi(k)
			if err != nil {
				return reads, fmt.Errorf("decode task counts: state %q", k)
			}
			reads.Counts[domain.TaskState(st)] = n
		}
		if t.Generation == *o.CountGeneration {
			reads.Counts[t.State]--
			reads.Counts[state]++
		}
	}
	if steps != nil {
		if err := decodeRows(steps, &reads.Steps); err != nil {
			return reads, fmt.Errorf("decode step actions: %w", err)
		}
		for i := range reads.Steps {
			if moved && reads.Steps[i].Name == t.ActionName {
				reads.Steps[i].Phase = string(o.Phase.To)
			}
		}
	}
	return reads, nil
}
