package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// TestDetailsMatchRows checks that GetRun, GetAction and GetAttemptRun, which
// read rows as
// the JSON Postgres builds from them, return what gorm scans from the same
// rows, with every nullable column set somewhere: a run with a retried
// failure, a pending reason, a kill request and an abort.
func TestDetailsMatchRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sqlDB := openWithDB(t)
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{})
	require.NoError(t, err)

	w := registerWorker(t, st)
	key := newRun(t, st, "r", domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		{Name: "a", Plugin: domain.PluginShell, Command: "true", MaxRetriesFailure: intp(1),
			Constraints: []domain.Constraint{{Key: "zone", Op: domain.OpEQ, Value: "a"}}},
		{Name: "b", Plugin: domain.PluginShell, Command: "sleep 9", Replicas: intp(2), Timeout: "1m"},
		{Name: "c", Plugin: domain.PluginNoop, DependsOn: []string{"a", "b"}}}})
	storetest.StartSteps(t, st, key, "a", "b") // c waits for them
	a := tasksOf(t, st, key, "a")[0].Task
	retryFailure(t, st, w, a.ID, 3)
	b := tasksOf(t, st, key, "b")
	require.NoError(t, st.Placement().SetPendingReasons(ctx, map[int64]string{a.ID: "no worker matches constraint zone=a"}))
	att, ok, err := storetest.AssignTask(ctx, st, b[0].Task.ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	pid := 42
	_, err = storetest.ReportAttempt(ctx, st, att.ID, store.Report{State: domain.TaskRunning, Pid: &pid})
	require.NoError(t, err)
	require.NoError(t, st.Aborts().RequestAttemptKill(ctx, att.ID, store.CausePreempted))
	_, err = st.Aborts().AbortAction(ctx, key.Action(domain.RootActionName), "enough", "aborted")
	require.NoError(t, err)

	d, err := st.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	var run store.Run
	require.NoError(t, db.Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Run).Take(&run).Error)
	requireSameJSON(t, run, d.Run)
	require.Len(t, d.Actions, 4)
	require.Equal(t, []string{"a", "b"}, []string(d.Actions[3].Action.DependsOn))
	for i, name := range []string{domain.RootActionName, "a", "b", "c"} {
		got := d.Actions[i]
		var act store.Action
		require.NoError(t, db.Where("project = ? AND domain = ? AND run_name = ? AND name = ?",
			key.Project, key.Domain, key.Run, name).Take(&act).Error)
		requireSameJSON(t, act, got.Action)
		var tasks []store.Task
		require.NoError(t, db.Where("project = ? AND domain = ? AND run_name = ? AND action_name = ?",
			key.Project, key.Domain, key.Run, name).Order("idx").Find(&tasks).Error)
		require.Len(t, got.Tasks, len(tasks))
		for j, td := range got.Tasks {
			requireSameJSON(t, tasks[j], td.Task)
			var attempts []store.Attempt
			require.NoError(t, db.Where("task_id = ?", tasks[j].ID).Order("number").Find(&attempts).Error)
			require.Len(t, td.Attempts, len(attempts))
			for k := range attempts {
				requireSameJSON(t, attempts[k], td.Attempts[k])
			}
		}
		one, err := st.Actions().GetAction(ctx, key.Action(name))
		require.NoError(t, err)
		requireSameJSON(t, got, one)
	}
	steps, err := st.Actions().StepActions(ctx, key)
	require.NoError(t, err)
	require.Len(t, steps, 3)
	for i := range steps {
		requireSameJSON(t, d.Actions[i+1].Action, steps[i])
	}
	ar, err := st.Attempts().GetAttemptRun(ctx, att.ID)
	require.NoError(t, err)
	requireSameJSON(t, d.Actions[2].Action, ar.Action)
	requireSameJSON(t, d.Actions[2].Tasks[0].Task, ar.Task)
	requireSameJSON(t, d.Actions[2].Tasks[0].Attempts[0], ar.Attempt)
	_, err = st.Attempts().GetAttemptRun(ctx, att.ID+1000)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = st.Actions().GetAction(ctx, key.Action("zzz"))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = st.Runs().GetRun(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "zzz"})
	require.ErrorIs(t, err, store.ErrNotFound)
}

// retryFailure runs an attempt of task id on w that FAILED with exit code
// exit, and requeues the task (failure_count 1, placeable at once), as the
// scheduler's evaluation of a failure within budget does.
func retryFailure(t *testing.T, st *store.Store, w store.Worker, id int64, exit int) {
	t.Helper()
	ctx := context.Background()
	a, ok, err := storetest.AssignTask(ctx, st, id, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)
	res, err := storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: domain.TaskFailed, ExitCode: &exit, Cause: "user"})
	require.NoError(t, err)
	require.True(t, res.Evaluate)
	b := domain.Budget{FailureCount: 1, MaxRetriesFailure: res.Task.MaxRetriesFailure,
		MaxRetriesPreemption: res.Task.MaxRetriesPreemption, MaxSystemFailures: res.Task.MaxSystemFailures}
	applyOutcome(t, st, a.ID, store.TaskOutcome{Budget: b, Requeue: true, NotBefore: time.Now().UTC(),
		Result: domain.ShouldRetry.String()})
	r, err := st.Attempts().GetAttemptRun(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, domain.TaskPending, r.Task.State)
	require.Equal(t, 1, r.Task.FailureCount)
	require.NotNil(t, r.Task.NotBefore)
	require.NotNil(t, r.Attempt.EvaluatedAt)
}

// requireSameJSON compares two values by their JSON (times compare as
// instants, whatever their location).
func requireSameJSON(t *testing.T, want, got any) {
	t.Helper()
	w, err := json.Marshal(want)
	require.NoError(t, err)
	g, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, string(w), string(g))
}
