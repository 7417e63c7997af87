package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// finishTask assigns task id to worker w and reports its attempt RUNNING,
// then state with outputs; it returns the attempt's id.
func finishTask(t *testing.T, st *store.Store, id int64, w store.Worker, state domain.TaskState, outputs map[string]string) int64 {
	t.Helper()
	ctx := context.Background()
	a, ok, err := storetest.AssignTask(ctx, st, id, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)
	_, err = storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: state, ExitCode: intp(0), Outputs: outputs})
	require.NoError(t, err)
	return a.ID
}

// succeedStep moves a step's action to SUCCEEDED, as the scheduler would
// once its tasks ended (set-up: the derivation is the scheduler's).
func succeedStep(t *testing.T, st *store.Store, key domain.ActionKey) {
	t.Helper()
	d, err := st.Actions().GetAction(context.Background(), key)
	require.NoError(t, err)
	ok, err := st.Actions().SetActionPhase(context.Background(), key, domain.Phase(d.Action.Phase), domain.PhaseSucceeded, time.Now().UTC())
	require.NoError(t, err)
	require.True(t, ok)
}

func TestStepOutputsAggregateReplicasOfSucceededSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	three := 3
	key := newRun(t, st, "outs", domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		{Name: "one", Command: "x", Outputs: []string{"count"}},
		{Name: "three", Command: "x", Replicas: &three, Outputs: []string{"n", "m"}, MaxTaskFailures: intp(1)},
		{Name: "plain", Command: "x"},
		{Name: "running", Command: "x", Outputs: []string{"v"}},
	}})
	storetest.StartSteps(t, st, key)

	one := finishTask(t, st, tasksOf(t, st, key, "one")[0].Task.ID, w, domain.TaskSucceeded, map[string]string{"count": "3\n"})
	got, err := st.Attempts().GetAttempt(ctx, one)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"count": "3\n"}, got.Outputs, "a SUCCEEDED report stores its outputs")
	ts := tasksOf(t, st, key, "three")
	finishTask(t, st, ts[0].Task.ID, w, domain.TaskSucceeded, map[string]string{"n": "a\n", "m": "x"})
	failed := finishTask(t, st, ts[1].Task.ID, w, domain.TaskFailed, map[string]string{"n": "ignored"})
	got, err = st.Attempts().GetAttempt(ctx, failed)
	require.NoError(t, err)
	require.Nil(t, got.Outputs, "only a SUCCEEDED report's outputs are stored")
	finishTask(t, st, ts[2].Task.ID, w, domain.TaskSucceeded, map[string]string{"n": `c "q" <b>`})
	finishTask(t, st, tasksOf(t, st, key, "plain")[0].Task.ID, w, domain.TaskSucceeded, nil)
	finishTask(t, st, tasksOf(t, st, key, "running")[0].Task.ID, w, domain.TaskSucceeded, map[string]string{"v": "1"})
	for _, step := range []string{"one", "three", "plain"} {
		succeedStep(t, st, key.Action(step))
	}

	all, err := st.Actions().StepOutputs(ctx, key, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]map[string]string{
		"one":   {"count": "3\n"},
		"three": {"n": `["a\n","","c \"q\" <b>"]`, "m": `["x","",""]`},
	}, all, "one replica: the value as written; three: a JSON array in task-index order, \"\" for a task "+
		"that reported none; a step not SUCCEEDED or declaring none has no entry")

	some, err := st.Actions().StepOutputs(ctx, key, []string{"three", "running", "nope"})
	require.NoError(t, err)
	require.Equal(t, map[string]map[string]string{"three": all["three"]}, some)
	none, err := st.Actions().StepOutputs(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "ghost"}, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

// A step run again (a retry as a whole, a restart) has its tasks anew under
// the action's next generation: only those count.
func TestStepOutputsReadTheCurrentGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	w := registerWorker(t, st)
	key := newRun(t, st, "gens", domain.WorkflowSpec{Steps: []domain.Step{
		{Name: "one", Command: "x", Outputs: []string{"count"}}}})
	storetest.StartSteps(t, st, key)
	ak := key.Action("one")
	finishTask(t, st, tasksOf(t, st, key, "one")[0].Task.ID, w, domain.TaskSucceeded, map[string]string{"count": "old"})
	succeedStep(t, st, ak)
	outs, err := st.Actions().StepOutputs(ctx, key, []string{"one"})
	require.NoError(t, err)
	require.Equal(t, "old", outs["one"]["count"])

	// The next generation, as the scheduler's retry or restart makes it
	// (set-up: those statements are the scheduler's).
	_, err = db.Exec(`UPDATE actions SET generation = 1 WHERE project = $1 AND domain = $2 AND run_name = $3 AND name = $4`,
		ak.Project, ak.Domain, ak.Run, ak.Action)
	require.NoError(t, err)
	var step domain.Step
	for _, s := range mustRun(t, st, key).Spec.Steps {
		if s.Name == "one" {
			step = s
		}
	}
	now := time.Now().UTC()
	tasks := store.NewTaskRows(ak, 1, domain.StepTasks(step, domain.DefaultMaxSystemFailures, now))
	require.NoError(t, st.Tasks().CreateTasks(ctx, key, now, store.StartedStep{Action: ak.Action, Tasks: tasks}))
	outs, err = st.Actions().StepOutputs(ctx, key, []string{"one"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"count": ""}, outs["one"], "the older generation's value is history")

	d, err := st.Actions().GetAction(ctx, ak)
	require.NoError(t, err)
	var id int64
	for _, x := range d.Tasks {
		if x.Task.Generation == 1 {
			id = x.Task.ID
		}
	}
	finishTask(t, st, id, w, domain.TaskSucceeded, map[string]string{"count": "new"})
	outs, err = st.Actions().StepOutputs(ctx, key, []string{"one"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"count": "new"}, outs["one"])
}

func mustRun(t *testing.T, st *store.Store, key domain.RunKey) store.Run {
	t.Helper()
	d, err := st.Runs().GetRun(context.Background(), key)
	require.NoError(t, err)
	return d.Run
}
