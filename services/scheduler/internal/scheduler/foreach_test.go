package scheduler

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// forEachRun is a DAG run: "list" writes the output files, "each" runs a
// task per item of it (fe), writing n, and "sum" reads each.n.
func forEachRun(fe domain.ForEach, each func(*domain.Step)) domain.WorkflowSpec {
	st := domain.Step{Name: "each", Command: "wc -l < $ITEM > $CAPSTAN_OUTPUTS_DIR/n", Outputs: []string{"n"},
		ForEach: &fe}
	if each != nil {
		each(&st)
	}
	return domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		{Name: "list", Command: "ls", Outputs: []string{"files"}},
		st,
		{Name: "sum", Command: "true", Inputs: []domain.Input{{From: "each.n", As: "N"}}},
	}}
}

// currentTasks returns the tasks of an action's current generation, in
// index order.
func (f *runFixture) currentTasks(t *testing.T, key domain.RunKey, name string) []store.Task {
	t.Helper()
	gen := f.action(t, key, name).Generation
	var out []store.Task
	for _, td := range f.tasks(t, key, name) {
		if td.Task.Generation == gen {
			out = append(out, td.Task)
		}
	}
	return out
}

// runTask runs task id on w to final and evaluates it.
func (f *runFixture) runTask(t *testing.T, w store.Worker, id int64, final store.Report) {
	t.Helper()
	a := f.attemptIn(t, w, id, reportRunning, final)
	_, err := f.s.evaluate(context.Background(), a.ID)
	require.NoError(t, err)
}

func succeededWith(n string) store.Report {
	return store.Report{State: domain.TaskSucceeded, ExitCode: iptr(0), Outputs: map[string]string{"n": n}}
}

// A for_each over an earlier step's output starts a task per item, each
// with its item, and its outputs gather in index order for the next step.
func TestForEachFromOutput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.startRun(t, "fan", forEachRun(domain.ForEach{From: "list.files", MaxParallel: iptr(2)}, nil))
	require.Empty(t, f.tasks(t, key, "each"), "it waits for its producer")
	f.finishStep(t, w, key, "list", store.Report{State: domain.TaskSucceeded, ExitCode: iptr(0),
		Outputs: map[string]string{"files": `["a.go", "b.go", {"c": 1}]` + "\n"}})
	tasks := f.currentTasks(t, key, "each")
	require.Len(t, tasks, 3)
	for i, want := range []string{"a.go", "b.go", `{"c":1}`} {
		require.Equal(t, i, tasks[i].Idx)
		require.Equal(t, want, *tasks[i].Item)
		require.Equal(t, domain.ForEachSlotKey("fan", "each", 0), *tasks[i].ConcurrencyKey, "max_parallel")
		require.Equal(t, 2, *tasks[i].ConcurrencyMax)
	}
	for i := 2; i >= 0; i-- { // out of order: the outputs still gather by index
		f.runTask(t, w, tasks[i].ID, succeededWith([]string{"1\n", "2\n", "3\n"}[i]))
	}
	require.Equal(t, string(domain.PhaseSucceeded), f.action(t, key, "each").Phase)
	outs, err := f.st.Actions().StepOutputs(ctx, key, []string{"each"})
	require.NoError(t, err)
	require.Equal(t, `["1\n","2\n","3\n"]`, outs["each"]["n"])
	require.Len(t, f.tasks(t, key, "sum"), 1, "the consumer started")
}

// A for_each over no item SUCCEEDS at once with empty arrays, and its
// consumer starts in the same advance; one whose list is not a JSON array
// fails with a reason naming it, and so does the run.
func TestForEachEmptyAndBadLists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	empty := f.startRun(t, "empty", forEachRun(domain.ForEach{From: "list.files"}, nil))
	f.finishStep(t, w, empty, "list", store.Report{State: domain.TaskSucceeded, ExitCode: iptr(0),
		Outputs: map[string]string{"files": "[]"}})
	each := f.action(t, empty, "each")
	require.Equal(t, string(domain.PhaseSucceeded), each.Phase)
	require.NotNil(t, each.StartedAt)
	outs, err := f.st.Actions().StepOutputs(ctx, empty, []string{"each"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"n": "[]"}, outs["each"])
	require.Len(t, f.tasks(t, empty, "sum"), 1)

	static := f.startRun(t, "static", domain.WorkflowSpec{Steps: []domain.Step{
		{Name: "each", Command: "true", ForEach: &domain.ForEach{Items: &[]any{}}}}})
	require.Equal(t, domain.PhaseSucceeded, f.runPhase(t, static), "an empty items list")

	bad := f.startRun(t, "bad", forEachRun(domain.ForEach{From: "list.files"}, nil))
	f.finishStep(t, w, bad, "list", store.Report{State: domain.TaskSucceeded, ExitCode: iptr(0),
		Outputs: map[string]string{"files": "a.go b.go"}})
	each = f.action(t, bad, "each")
	require.Equal(t, string(domain.PhaseFailed), each.Phase)
	require.Contains(t, *each.Reason, `for_each.from list.files is not a JSON array: "a.go b.go"`)
	require.Equal(t, domain.PhaseFailed, f.runPhase(t, bad))
}

// Static items reach their tasks; a restart reruns only the item that
// failed, the others kept SUCCEEDED with their outputs.
func TestForEachRestartRerunsFailedItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	items := []any{"x", 2.0, true}
	key := f.startRun(t, "items", domain.WorkflowSpec{Steps: []domain.Step{{Name: "each", Command: "echo $ITEM",
		Outputs: []string{"n"}, MaxRetriesFailure: iptr(0), ForEach: &domain.ForEach{Items: &items}}}})
	tasks := f.currentTasks(t, key, "each")
	require.Len(t, tasks, 3)
	require.Equal(t, []string{"x", "2", "true"}, []string{*tasks[0].Item, *tasks[1].Item, *tasks[2].Item})
	f.runTask(t, w, tasks[0].ID, succeededWith("x"))
	f.runTask(t, w, tasks[2].ID, succeededWith("t"))
	f.runTask(t, w, tasks[1].ID, store.Report{State: domain.TaskFailed, ExitCode: iptr(1), Cause: "user"})
	require.Equal(t, domain.PhaseFailed, f.runPhase(t, key))

	_, err := f.db.Exec(`UPDATE runs SET restart_requested_at = now() WHERE name = 'items'`)
	require.NoError(t, err)
	_, err = f.s.advance(ctx, key)
	require.NoError(t, err)
	again := f.currentTasks(t, key, "each")
	require.Len(t, again, 3)
	require.Equal(t, domain.TaskSucceeded, again[0].State)
	require.Equal(t, map[string]string{"n": "x"}, again[0].Outputs)
	require.Equal(t, domain.TaskPending, again[1].State, "only the failed item reruns")
	require.Equal(t, domain.TaskSucceeded, again[2].State)
	f.runTask(t, w, again[1].ID, succeededWith("2"))
	require.Equal(t, domain.PhaseSucceeded, f.runPhase(t, key))
	outs, err := f.st.Actions().StepOutputs(ctx, key, []string{"each"})
	require.NoError(t, err)
	require.Equal(t, `["x","2","t"]`, outs["each"]["n"])
}

// A cached for_each has an entry per item: a later run reruns only the
// item it has not seen.
func TestForEachCachePerItem(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	spec := func(items ...any) domain.WorkflowSpec {
		return domain.WorkflowSpec{Steps: []domain.Step{{Name: "each", Command: "echo $ITEM", Outputs: []string{"n"},
			Cache: &domain.CacheSpec{Version: "v1"}, ForEach: &domain.ForEach{Items: &items}}}}
	}
	first := f.startRun(t, "first", spec("a", "b"))
	require.Equal(t, domain.CacheMiss, *f.action(t, first, "each").CacheStatus)
	for i, tk := range f.currentTasks(t, first, "each") {
		f.runTask(t, w, tk.ID, succeededWith([]string{"A", "B"}[i]))
	}
	require.Equal(t, domain.CachePopulated, *f.action(t, first, "each").CacheStatus)

	second := f.startRun(t, "second", spec("b", "c", "a"))
	tasks := f.currentTasks(t, second, "each")
	require.Equal(t, []domain.TaskState{domain.TaskSucceeded, domain.TaskPending, domain.TaskSucceeded},
		[]domain.TaskState{tasks[0].State, tasks[1].State, tasks[2].State})
	require.Equal(t, map[string]string{"n": "B"}, tasks[0].Outputs)
	f.runTask(t, w, tasks[1].ID, succeededWith("C"))
	outs, err := f.st.Actions().StepOutputs(context.Background(), second, []string{"each"})
	require.NoError(t, err)
	require.Equal(t, `["B","C","A"]`, outs["each"]["n"])

	third := f.startRun(t, "third", spec("c", "a"))
	each := f.action(t, third, "each")
	require.Equal(t, string(domain.PhaseSucceeded), each.Phase, "every item hit")
	require.Equal(t, domain.CacheHit, *each.CacheStatus)
}

// A for_each task's dispatch carries its item as the input named by as.
func TestForEachDispatchCarriesItem(t *testing.T) {
	t.Parallel()
	item := "a.go"
	a := store.Assigned{Attempt: store.Attempt{ID: 7, Number: 1}, Project: "p", Domain: "d", RunName: "r",
		ActionName: "each", TaskIdx: 3, TaskItem: &item, Step: domain.Step{Name: "each", Plugin: domain.PluginShell,
			Command: "cat $FILE", ForEach: &domain.ForEach{As: "FILE"}}}
	spec, ok := dispatchSpec(a)
	require.True(t, ok)
	require.Equal(t, map[string]string{"FILE": "a.go"}, *spec.Inputs)
	a.TaskItem = nil
	spec, ok = dispatchSpec(a)
	require.True(t, ok)
	require.Nil(t, spec.Inputs, "a replica has none")
}
