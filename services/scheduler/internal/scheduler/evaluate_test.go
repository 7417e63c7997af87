package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

func TestRetryWithinBudgetThenTerminal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "retry", domain.WorkflowSpec{Steps: []domain.Step{
		{Name: "flaky", Command: "false", MaxRetriesFailure: iptr(1)},
		{Name: "after", Command: "true"},
	}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	id := f.tasks(t, key, "flaky")[0].Task.ID

	ev := f.runAttempt(t, w, id, domain.TaskFailed, 1)
	require.Equal(t, domain.ShouldRetry, ev.Result, "failure_count 1 <= max_retries_failure 1")
	td := f.tasks(t, key, "flaky")[0]
	require.Equal(t, domain.TaskPending, td.Task.State)
	require.Equal(t, 1, td.Task.FailureCount)
	require.Nil(t, td.Task.WorkerID, "resources released")

	ev = f.runAttempt(t, w, id, domain.TaskFailed, 1)
	require.Equal(t, domain.ExceededRetryLimit, ev.Result, "failure_count 2 > 1")
	require.Equal(t, domain.PhaseFailed, ev.ActionPhase)
	td = f.tasks(t, key, "flaky")[0]
	require.Equal(t, domain.TaskFailed, td.Task.State)
	require.Len(t, td.Attempts, 2)
	require.NotNil(t, ev.Advance, "the step ended: its evaluation advanced the run")
	require.Equal(t, domain.PhaseFailed, ev.Advance.Phase, "fail fast")

	adv, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	require.Equal(t, domain.PhaseFailed, adv.Phase, "fail fast")
	d, err := f.st.Actions().GetAction(ctx, key.Action("after"))
	require.NoError(t, err)
	require.Equal(t, "SKIPPED", d.Action.Phase)
}

func TestGangCascadeAndMaxTaskFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "gang", domain.WorkflowSpec{Steps: []domain.Step{{Name: "g", Command: "true", Replicas: iptr(3), Coscheduled: true}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	tasks := f.tasks(t, key, "g")
	var sibling store.Attempt
	for i, td := range tasks[1:] {
		a, ok, err := storetest.AssignTask(ctx, f.st, td.Task.ID, w.ID)
		require.NoError(t, err)
		require.True(t, ok)
		if i == 0 {
			_, err = storetest.ReportAttempt(ctx, f.st, a.ID, store.Report{State: domain.TaskRunning})
			require.NoError(t, err)
			sibling = a
		}
	}
	ev := f.runAttempt(t, w, tasks[0].Task.ID, domain.TaskFailed, 2)
	require.Equal(t, domain.ExceededRetryLimit, ev.Result)
	require.Equal(t, domain.PhaseFailed, ev.ActionPhase)
	require.NotNil(t, ev.AbortSurvivors, "the siblings' live attempts must be killed")

	got := f.tasks(t, key, "g")
	for _, td := range got[1:] {
		require.Equal(t, domain.TaskWorkerFailed, td.Task.State, "running siblings are exhausted to WORKER_FAILED")
		require.Greater(t, td.Task.PreemptionCount, td.Task.MaxRetriesPreemption)
	}
	live, err := f.st.Aborts().LiveAttemptsUnder(ctx, key.Action("g"))
	require.NoError(t, err)
	require.Len(t, live, 2)
	require.Equal(t, sibling.ID, live[0].ID)
}

// TestGangCascadeSparesPreemptedTasks checks which terminal failure of a
// coscheduled task exhausts its siblings. Iris's task-states reference: "When a task in a
// coscheduled (gang-scheduled) job fails terminally,
// _cascade_coscheduled_failure exhausts the preemption budget of all running
// siblings and transitions them to WORKER_FAILED (terminal)", but "unlike
// WORKER_FAILED reported via heartbeat, preempt_task does not directly
// cascade coscheduled siblings — the cascade only occurs through job
// finalization."
// TestEndingSiblingsLocksThemInOrder: an evaluation that ends the other
// tasks of its action (a gang's cascade, a failed job's survivors) takes
// their locks in id order with its own task's, never after it. A
// transaction that holds a sibling below the failed task and then asks for
// the failed task's row (as a report batch locks its tasks in id order)
// gets it, instead of a deadlock Postgres has to break.
func TestEndingSiblingsLocksThemInOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		coscheduled bool
		siblings    domain.TaskState
	}{
		{"a gang's cascade", true, domain.TaskWorkerFailed},
		{"a failed job's survivors", false, domain.TaskKilled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newRunFixture(t, domain.ARCTable)
			w := f.register(t)
			key := f.newRun(t, "siblings", domain.WorkflowSpec{Steps: []domain.Step{{Name: "g", Command: "sleep 600",
				Replicas: iptr(3), Coscheduled: tt.coscheduled, MaxRetriesFailure: iptr(0)}}})
			_, err := f.s.advance(ctx, key)
			require.NoError(t, err)
			tasks := f.tasks(t, key, "g")
			f.attemptIn(t, w, tasks[0].Task.ID, reportRunning)
			f.attemptIn(t, w, tasks[1].Task.ID, reportRunning)
			victim := f.attemptIn(t, w, tasks[2].Task.ID, reportRunning)
			_, err = storetest.ReportAttempt(ctx, f.st, victim.ID, reportUserFail)
			require.NoError(t, err)

			holder, err := f.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer holder.Rollback()
			_, err = holder.ExecContext(ctx, `SET LOCAL lock_timeout = '20s'`)
			require.NoError(t, err)
			_, err = holder.ExecContext(ctx, `SELECT id FROM tasks WHERE id = $1 FOR UPDATE`, tasks[0].Task.ID)
			require.NoError(t, err)

			done := make(chan error, 1)
			go func() { _, err := f.s.evaluate(ctx, victim.ID); done <- err }()
			require.Eventually(t, func() bool {
				var n int
				err := f.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
				return err == nil && n > 0
			}, 10*time.Second, 5*time.Millisecond, "the evaluation waits for the sibling the holder locked")
			_, err = holder.ExecContext(ctx, `SELECT id FROM tasks WHERE id = $1 FOR UPDATE`, tasks[2].Task.ID)
			require.NoError(t, err, "the failed task's row is free while its evaluation waits for a sibling below it")
			require.NoError(t, holder.Commit())
			require.NoError(t, <-done)
			for _, td := range f.tasks(t, key, "g")[:2] {
				require.Equal(t, tt.siblings, td.Task.State)
			}
		})
	}
}

func TestGangCascadeSparesPreemptedTasks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		final   store.Report
		cascade bool
		// phase is the job's phase after the evaluation.
		phase domain.Phase
	}{
		{"a terminal FAILED task cascades", reportUserFail, true, domain.PhaseFailed},
		{"a terminal WORKER_FAILED task cascades", reportWorkerLost, true, domain.PhaseWorkerFailed},
		{"a terminal PREEMPTED task does not", reportPreempted, false, domain.PhaseRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newRunFixture(t, domain.ARCTable)
			w := f.register(t)
			key := f.newRun(t, "gang", domain.WorkflowSpec{Steps: []domain.Step{{Name: "g", Command: "sleep 600",
				Replicas: iptr(3), Coscheduled: true, Priority: "batch", MaxRetriesPreemption: iptr(0)}}})
			_, err := f.s.advance(ctx, key)
			require.NoError(t, err)
			tasks := f.tasks(t, key, "g")
			victim := f.attemptIn(t, w, tasks[0].Task.ID, reportRunning)
			f.attemptIn(t, w, tasks[1].Task.ID, reportRunning)
			f.attemptIn(t, w, tasks[2].Task.ID) // ASSIGNED
			if tt.final.State == domain.TaskPreempted {
				_, kill, err := f.s.preemptAttempt(ctx, victim.ID)
				require.NoError(t, err)
				require.True(t, kill, "a started victim is killed, then reports PREEMPTED")
			}
			res, err := storetest.ReportAttempt(ctx, f.st, victim.ID, tt.final)
			require.NoError(t, err)
			require.True(t, res.Evaluate)

			ev, err := f.s.evaluate(ctx, victim.ID)
			require.NoError(t, err)
			require.Equal(t, domain.ExceededRetryLimit, ev.Result, "no budget left: the task ends")
			require.Equal(t, tt.phase, ev.ActionPhase)
			got := f.tasks(t, key, "g")
			require.Equal(t, tt.final.State, got[0].Task.State)
			for _, td := range got[1:] {
				if tt.cascade {
					require.Equal(t, domain.TaskWorkerFailed, td.Task.State, "siblings exhausted to WORKER_FAILED")
					require.Greater(t, td.Task.PreemptionCount, td.Task.MaxRetriesPreemption)
					continue
				}
				require.True(t, td.Task.State.IsLive(), "sibling %d runs on: %s", td.Task.Idx, td.Task.State)
				require.Zero(t, td.Task.PreemptionCount)
			}
			cascades := 0
			if tt.cascade {
				cascades = 1
			}
			require.Equal(t, cascades, f.events(t, "action.gang_cascade", 0))
			if tt.cascade {
				return
			}

			// The job ends through its finalization once every task is
			// terminal: WORKER_FAILED, for its PREEMPTED task.
			for _, td := range got[1:] {
				a := td.Attempts[0]
				if a.State == domain.TaskAssigned {
					_, err := storetest.ReportAttempt(ctx, f.st, a.ID, reportRunning)
					require.NoError(t, err)
				}
				_, err := storetest.ReportAttempt(ctx, f.st, a.ID, reportSucceeded)
				require.NoError(t, err)
				ev, err = f.s.evaluate(ctx, a.ID)
				require.NoError(t, err)
			}
			require.Equal(t, domain.PhaseWorkerFailed, ev.ActionPhase)
		})
	}
}

func TestMaxTaskFailuresToleratesFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "tolerant", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: iptr(3),
		MaxTaskFailures: iptr(1)}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	tasks := f.tasks(t, key, "s")
	ev := f.runAttempt(t, w, tasks[0].Task.ID, domain.TaskFailed, 1)
	require.Equal(t, domain.PhaseRunning, ev.ActionPhase, "1 FAILED <= max_task_failures 1: the job goes on")
	f.runAttempt(t, w, tasks[1].Task.ID, domain.TaskSucceeded, 0)
	ev = f.runAttempt(t, w, tasks[2].Task.ID, domain.TaskSucceeded, 0)
	require.Equal(t, domain.PhaseSucceeded, ev.ActionPhase, "all finished, failures within tolerance")
}

// The only task of a one-replica step decides its action's phase: its
// outcome carries the action's move, in one statement, with the events in
// the same order as two would write them. A failure is not carried: the
// step's failure policy decides first.
func TestOnlyTaskCarriesItsActionsMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "only", domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true"}, {Name: "b", Command: "false"}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	before := statementCounts(t, f.statements)
	ev := f.runAttempt(t, w, f.tasks(t, key, "a")[0].Task.ID, domain.TaskSucceeded, 0)
	after := statementCounts(t, f.statements)
	require.Equal(t, domain.PhaseSucceeded, ev.ActionPhase)
	require.Equal(t, int64(1), after["UpdateTaskOutcomes"]-before["UpdateTaskOutcomes"], "its outcome, written as a batch's")
	require.Zero(t, after["UpdateTaskOutcome"]-before["UpdateTaskOutcome"])
	require.Zero(t, after["SetActionPhase"]-before["SetActionPhase"], "the move rode with the task's outcome")
	d, err := f.st.Actions().GetAction(ctx, key.Action("a"))
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseSucceeded), d.Action.Phase)
	require.NotNil(t, d.Action.EndedAt)
	var last2 string
	require.NoError(t, f.db.QueryRow(`SELECT string_agg(type || coalesce(' ' || (data->>'to'), ''), ', ' ORDER BY id)
		FROM (SELECT * FROM run_events WHERE run_name = 'only' AND action_name = 'a' ORDER BY id DESC LIMIT 2) e`).Scan(&last2))
	require.Equal(t, "task.NO_RETRY, action.phase SUCCEEDED", last2)

	before = statementCounts(t, f.statements)
	ev = f.runAttempt(t, w, f.tasks(t, key, "b")[0].Task.ID, domain.TaskFailed, 1)
	after = statementCounts(t, f.statements)
	require.Equal(t, domain.PhaseFailed, ev.ActionPhase)
	require.Equal(t, int64(1), after["SetActionPhase"]-before["SetActionPhase"], "a failure is written on its own")
}
