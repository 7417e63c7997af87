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

// finish assigns the task to w, reports reps and evaluates the attempt.
func (f *runFixture) finish(t *testing.T, w store.Worker, taskID int64, reps ...store.Report) (store.Attempt, Evaluation) {
	t.Helper()
	a := f.attemptIn(t, w, taskID, reps...)
	ev, err := f.s.evaluate(context.Background(), a.ID)
	require.NoError(t, err)
	require.True(t, ev.Done)
	return a, ev
}

// Flyte's executor (TaskActionReconciler): "The reconciler allows up to
// MaxSystemFailures (default 3) ... If the threshold is exceeded, the task
// is moved to PermanentFailure with the code MaxSystemFailuresExceeded."
// System failures are retried in place on the same task without charging
// failure_count; attempts that reached RUNNING before failing as system
// failures do not reset the count (the livelock guard).
func TestSystemFailuresRetriedInPlaceThenMaxSystemFailuresExceeded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	w := f.register(t)
	key := f.newRun(t, "sys", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Args: []string{"/no/such/binary"}}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	id := f.tasks(t, key, "s")[0].Task.ID
	require.Equal(t, 3, f.tasks(t, key, "s")[0].Task.MaxSystemFailures, "the scheduler's default")

	for i := range 3 {
		_, ev := f.finish(t, w, id, reportRunning, reportSystemFail)
		require.Equal(t, domain.ShouldRetry, ev.Result, "system failure %d of 3 is retried in place", i+1)
		td := f.tasks(t, key, "s")[0]
		require.Equal(t, domain.TaskPending, td.Task.State)
		require.Equal(t, i+1, td.Task.SystemFailureCount, "a started attempt that failed as a system failure resets nothing")
		require.Zero(t, td.Task.FailureCount)
	}
	last, ev := f.finish(t, w, id, reportSystemFail)
	require.Equal(t, domain.ExceededRetryLimit, ev.Result)
	require.Equal(t, domain.PhaseFailed, ev.ActionPhase)

	d, err := f.st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	td := d.Tasks[0]
	require.Equal(t, domain.TaskFailed, td.Task.State)
	require.Zero(t, td.Task.FailureCount, "system failures never charge the user's budget")
	require.Equal(t, 4, td.Task.SystemFailureCount)
	require.Len(t, td.Attempts, 4, "one task, retried in place")
	for _, a := range td.Attempts[:3] {
		require.Nil(t, a.Code)
		require.Equal(t, domain.CauseSystem, *a.Cause)
	}
	require.Equal(t, domain.CodeMaxSystemFailuresExceeded, *f.attempt(t, last.ID).Code)
	require.Equal(t, domain.CodeMaxSystemFailuresExceeded, *d.Action.Reason, "the action says why it failed")
	require.Equal(t, 1, f.events(t, "task.EXCEEDED_RETRY_LIMIT", last.ID))
}

// The count resets only when an attempt really progresses: reached
// RUNNING and was no system failure.
func TestSystemFailureCountResetsOnlyOnProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	w := f.register(t)
	key := f.newRun(t, "reset", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x",
		MaxSystemFailures: iptr(2), MaxRetriesFailure: iptr(1)}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	id := f.tasks(t, key, "s")[0].Task.ID
	require.Equal(t, 2, f.tasks(t, key, "s")[0].Task.MaxSystemFailures, "the step's max_system_failures")

	f.finish(t, w, id, reportSystemFail)
	f.finish(t, w, id, reportUserFail) // never reached RUNNING: no reset
	require.Equal(t, 1, f.tasks(t, key, "s")[0].Task.SystemFailureCount)
	f.finish(t, w, id, reportSystemFail)
	require.Equal(t, 2, f.tasks(t, key, "s")[0].Task.SystemFailureCount)
	_, ev := f.finish(t, w, id, reportRunning, reportUserFail)
	require.Equal(t, domain.ExceededRetryLimit, ev.Result, "the second user failure exceeds max_retries_failure 1")
	td := f.tasks(t, key, "s")[0]
	require.Zero(t, td.Task.SystemFailureCount, "RUNNING then a user failure: progressed, reset")
	require.Equal(t, 2, td.Task.FailureCount)
	require.Nil(t, td.Attempts[3].Code, "a user failure gets no code")
}

// A permanent failure (a spec that can never run) fails the task at once,
// whatever its budgets; the executor's code is the action's reason.
func TestPermanentFailureFailsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	w := f.register(t)
	key := f.newRun(t, "perm", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x",
		MaxRetriesFailure: iptr(5)}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	id := f.tasks(t, key, "s")[0].Task.ID
	a, ev := f.finish(t, w, id, store.Report{State: domain.TaskFailed, Cause: domain.CausePermanent,
		Code: "InvalidPluginSpec", Error: "unknown plugin \"wasm\""})
	require.Equal(t, domain.ExceededRetryLimit, ev.Result)
	require.Equal(t, domain.PhaseFailed, ev.ActionPhase)
	d, err := f.st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	require.Equal(t, domain.TaskFailed, d.Tasks[0].Task.State)
	require.Zero(t, d.Tasks[0].Task.FailureCount)
	require.Equal(t, "InvalidPluginSpec", *f.attempt(t, a.ID).Code)
	require.Equal(t, "InvalidPluginSpec", *d.Action.Reason)
}

func TestConfigMaxSystemFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	five := 5
	f.s.cfg.MaxSystemFailures = &five
	key := f.newRun(t, "cfg", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x"},
		{Name: "z", Command: "x", MaxSystemFailures: iptr(0)}}, Mode: domain.ModeDAG})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	require.Equal(t, 5, f.tasks(t, key, "s")[0].Task.MaxSystemFailures, "CAPSTAN_MAX_SYSTEM_FAILURES")
	require.Equal(t, 0, f.tasks(t, key, "z")[0].Task.MaxSystemFailures, "the step's 0 wins")
	bad := -1
	require.Error(t, Config{MaxSystemFailures: &bad}.Validate())
}

// Flyte's handleAbortAndFinalize: the plugin's Abort, its Finalize, (the
// release of a cache reservation), then the Aborted event. The executor
// reports Abort and Finalize with the stopped attempt's final report; the
// evaluation of that last attempt writes "action.aborted" after them.
func TestAbortFinalizationEventsInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "abort", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600"}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	a := f.attemptIn(t, w, f.tasks(t, key, "s")[0].Task.ID, reportRunning)
	_, err = f.st.Aborts().AbortAction(ctx, key.Action("s"), "stop", "")
	require.NoError(t, err)
	at := time.Now().UTC()
	res, err := storetest.ReportAttempt(ctx, f.st, a.ID, store.Report{State: domain.TaskKilled, Cause: domain.CauseAborted,
		Cleanup: []store.CleanupStep{{Step: store.CleanupAbort, At: at, Error: "SIGTERM ignored"},
			{Step: store.CleanupFinalize, At: at.Add(time.Millisecond)}}})
	require.NoError(t, err)
	require.True(t, res.Evaluate, "the abort's last attempt is evaluated to finish the abort")
	ev, err := f.s.evaluate(ctx, a.ID)
	require.NoError(t, err)
	require.True(t, ev.Done)
	again, err := f.s.evaluate(ctx, a.ID)
	require.NoError(t, err)
	require.False(t, again.Done)

	rows, err := f.db.Query(`SELECT type FROM run_events WHERE run_name = $1 AND type IN
		('plugin_abort', 'plugin_finalize', 'attempt.KILLED', 'action.aborted') ORDER BY id`, key.Run)
	require.NoError(t, err)
	defer rows.Close()
	var types []string
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		types = append(types, typ)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"plugin_abort", "plugin_finalize", "attempt.KILLED", "action.aborted"}, types)
	require.Equal(t, 1, f.events(t, "plugin_abort", a.ID), "each cleanup step names its attempt")
}

// An abort of a step with two live attempts is finished by the evaluation
// of the last one to stop.
func TestAbortFinishedByTheLastAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "two", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Replicas: iptr(2)}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	var ids []int64
	for _, td := range f.tasks(t, key, "s") {
		a, ok, err := storetest.AssignTask(ctx, f.st, td.Task.ID, w.ID)
		require.NoError(t, err)
		require.True(t, ok)
		ids = append(ids, a.ID)
	}
	_, err = f.st.Aborts().AbortAction(ctx, key.Action("s"), "stop", "")
	require.NoError(t, err)
	for i, id := range ids {
		_, err := storetest.ReportAttempt(ctx, f.st, id, reportKilledAbort)
		require.NoError(t, err)
		_, err = f.s.evaluate(ctx, id)
		require.NoError(t, err)
		require.Equal(t, i, f.events(t, "action.aborted", 0), "written once, when the last attempt stopped")
	}
}

// An attempt the abort found already gone (its executor no longer knew it)
// is evaluated too, so the abort still ends with its ABORTED event.
func TestAbortOfAGoneAttemptIsFinished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "gone", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600"}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	a := f.attemptIn(t, w, f.tasks(t, key, "s")[0].Task.ID, reportRunning)
	_, err = f.st.Aborts().AbortAction(ctx, key.Action("s"), "stop", domain.CauseTimeout)
	require.NoError(t, err)
	evaluate, err := f.st.Aborts().MarkAttemptsGone(ctx, []int64{a.ID}, domain.CauseTimeout)
	require.NoError(t, err)
	require.Equal(t, []int64{a.ID}, evaluate)
	_, err = f.s.evaluate(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, 1, f.events(t, "action.aborted", a.ID))
	var phase string
	require.NoError(t, f.db.QueryRow(`SELECT data->>'phase' FROM run_events WHERE type = 'action.aborted' AND attempt_id = $1`,
		a.ID).Scan(&phase))
	require.Equal(t, string(domain.PhaseTimedOut), phase)
}
