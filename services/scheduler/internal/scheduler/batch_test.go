package scheduler

import (
	"context"
	"fmt"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// One runs:start message starts every run it names, as run:start starts
// one: each run RUNNING with its first step's task; a name of no run is
// skipped, not a failure of the others. Applied again, it changes nothing.
func TestHandleRunsStartsEachRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true"}, {Name: "b", Command: "true"}}}
	var names []string
	for i := range 9 {
		names = append(names, f.newRun(t, fmt.Sprintf("r%d", i), spec).Run)
	}
	task := queue.NewRunsStartTask("p", "d", append(names, "missing"))
	for range 2 {
		require.NoError(t, f.s.handleRuns(ctx, task))
		for _, name := range names {
			key := domain.RunKey{Project: "p", Domain: "d", Run: name}
			d, err := f.st.Runs().GetRun(ctx, key)
			require.NoError(t, err)
			require.Equal(t, string(domain.PhaseRunning), d.Run.Phase, name)
			require.Len(t, f.tasks(t, key, "a"), 1, name)
			require.Empty(t, f.tasks(t, key, "b"), name)
		}
	}
}

// One tasks:evaluate message (the attempts a report batch ended) evaluates
// each as task:evaluate would: every task SUCCEEDED; a missing attempt is
// skipped; applied again, it changes nothing.
func TestHandleEvaluationsEvaluatesEachAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	w := f.register(t)
	exit := 0
	var ids []int64
	for _, taskID := range f.startedTasks(t, "batch", 3) {
		ids = append(ids, f.attemptIn(t, w, taskID, store.Report{State: domain.TaskRunning},
			store.Report{State: domain.TaskSucceeded, ExitCode: &exit}).ID)
	}
	task := queue.NewTasksEvaluateTask(append(ids, 999999))
	require.Equal(t, queue.TypeTasksEvaluate, task.Type())
	for range 2 {
		require.NoError(t, f.s.handleEvaluations(ctx, task))
		for _, id := range ids {
			require.NotNil(t, f.attempt(t, id).EvaluatedAt, "attempt %d evaluated", id)
		}
		tasks := f.tasks(t, domain.RunKey{Project: "p", Domain: "d", Run: "batch"}, "s")
		require.Len(t, tasks, 3)
		for _, td := range tasks {
			require.Equal(t, domain.TaskSucceeded, td.Task.State)
		}
	}
}

// TestBatchCountsAnActionsTasksOnce: a batch of an action's replicas
// derives the action's phase once, from the counts all of them left, and
// the action moves when its last replica's batch ends it, with one move.
// The replicas before the last write their tasks in one statement, before
// the last one's settle writes its own and counts.
func TestBatchCountsAnActionsTasksOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	w := f.register(t)
	ok := store.Report{State: domain.TaskSucceeded, ExitCode: iptr(0)}
	var ids []int64
	for _, taskID := range f.startedTasks(t, "five", 5) {
		ids = append(ids, f.attemptIn(t, w, taskID, ok).ID)
	}
	key := domain.RunKey{Project: "p", Domain: "d", Run: "five"}
	for _, batch := range []struct {
		ids   []int64
		phase domain.Phase
	}{{ids[:3], domain.PhaseRunning}, {ids[3:], domain.PhaseSucceeded}} {
		before := statementCounts(t, f.statements)
		require.NoError(t, f.s.handleEvaluations(ctx, queue.NewTasksEvaluateTask(batch.ids)))
		after := statementCounts(t, f.statements)
		require.Equal(t, int64(1), after["UpdateTaskOutcome"]-before["UpdateTaskOutcome"], "the last replica's")
		require.Equal(t, int64(1), after["UpdateTaskOutcomes"]-before["UpdateTaskOutcomes"], "the others'")
		require.Equal(t, int64(1), after["CountTaskStates"]-before["CountTaskStates"], "one count a batch")
		d, err := f.st.Actions().GetAction(ctx, key.Action("s"))
		require.NoError(t, err)
		require.Equal(t, string(batch.phase), d.Action.Phase)
	}
	for _, id := range ids {
		require.NotNil(t, f.attempt(t, id).EvaluatedAt, "attempt %d evaluated", id)
	}
	d, err := f.st.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseSucceeded), d.Run.Phase)
	var moves string
	require.NoError(t, f.db.QueryRow(`SELECT string_agg(data->>'to', ', ' ORDER BY id) FROM run_events
		WHERE run_name = 'five' AND action_name = 's' AND type = 'action.phase'`).Scan(&moves))
	require.Equal(t, "RUNNING, SUCCEEDED", moves)
}

// A tasks:evaluate message evaluates its attempts together in one
// transaction (they share one evaluated_at), a failure among them too (its
// run fails). Runs of one step end SUCCEEDED, also the one whose two
// replicas end in the batch; a run whose two root steps end in the batch
// starts their dependent step once.
func TestHandleEvaluationsEvaluatesAttemptsTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	w := f.register(t)
	exit, failed := 0, 1
	ok := store.Report{State: domain.TaskSucceeded, ExitCode: &exit}
	var together []int64
	var ended []domain.RunKey
	for i := range 4 {
		taskID := f.startedTasks(t, fmt.Sprintf("ok%d", i), 1)[0]
		ended = append(ended, domain.RunKey{Project: "p", Domain: "d", Run: fmt.Sprintf("ok%d", i)})
		together = append(together, f.attemptIn(t, w, taskID, store.Report{State: domain.TaskRunning}, ok).ID)
	}
	for _, taskID := range f.startedTasks(t, "pair", 2) {
		together = append(together, f.attemptIn(t, w, taskID, ok).ID)
	}
	ended = append(ended, domain.RunKey{Project: "p", Domain: "d", Run: "pair"})
	dag := f.newRun(t, "dag", domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		{Name: "a", Command: "true"}, {Name: "b", Command: "true"}, {Name: "c", Command: "true", DependsOn: []string{"a", "b"}}}})
	_, err := f.s.advance(ctx, dag)
	require.NoError(t, err)
	for _, step := range []string{"a", "b"} {
		together = append(together, f.attemptIn(t, w, f.tasks(t, dag, step)[0].Task.ID, ok).ID)
	}
	fail := f.attemptIn(t, w, f.startedTasks(t, "fail", 1)[0],
		store.Report{State: domain.TaskFailed, ExitCode: &failed}).ID
	ids := append([]int64{fail}, together...)
	require.NoError(t, f.s.handleEvaluations(ctx, queue.NewTasksEvaluateTask(append(ids, 999999))))

	at := f.attempt(t, together[0]).EvaluatedAt
	require.NotNil(t, at)
	for _, id := range together[1:] {
		got := f.attempt(t, id).EvaluatedAt
		require.NotNil(t, got, "attempt %d evaluated", id)
		require.True(t, at.Equal(*got), "attempt %d evaluated with the others: %s, %s", id, got, at)
	}
	got := f.attempt(t, fail).EvaluatedAt
	require.NotNil(t, got, "the failure evaluated")
	require.True(t, at.Equal(*got), "the failure evaluated with the others")
	for _, key := range ended {
		d, err := f.st.Runs().GetRun(ctx, key)
		require.NoError(t, err)
		require.Equal(t, string(domain.PhaseSucceeded), d.Run.Phase, key.Run)
		require.NotNil(t, d.Run.EndedAt, key.Run)
	}
	require.Len(t, f.tasks(t, dag, "c"), 1, "c started once")
	d, err := f.st.Runs().GetRun(ctx, dag)
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseRunning), d.Run.Phase)
	failedKey := domain.RunKey{Project: "p", Domain: "d", Run: "fail"}
	require.Equal(t, domain.TaskFailed, f.tasks(t, failedKey, "s")[0].Task.State)
	d, err = f.st.Runs().GetRun(ctx, failedKey)
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseFailed), d.Run.Phase)
}

// A batch that advances several runs writes its tasks' outcomes in one
// statement, reads their step actions in one statement (not one
// StepActions a run) after that, and creates the tasks of the steps they
// start in one statement: the runs of two steps (a, then b) start b, then
// end SUCCEEDED, with each task's and action's events.
func TestBatchReadsTheStepsOfItsRunsTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	w := f.register(t)
	ok := store.Report{State: domain.TaskSucceeded, ExitCode: iptr(0)}
	var keys []domain.RunKey
	for i := range 3 {
		key := f.newRun(t, fmt.Sprintf("two%d", i), domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
			{Name: "a", Command: "true"}, {Name: "b", Command: "true", DependsOn: []string{"a"}}}})
		_, err := f.s.advance(ctx, key)
		require.NoError(t, err)
		keys = append(keys, key)
	}
	for _, step := range []struct {
		name    string
		phase   domain.Phase
		creates int64
	}{{"a", domain.PhaseRunning, 1}, {"b", domain.PhaseSucceeded, 0}} {
		var ids []int64
		for _, key := range keys {
			ids = append(ids, f.attemptIn(t, w, f.tasks(t, key, step.name)[0].Task.ID, ok).ID)
		}
		before := statementCounts(t, f.statements)
		require.NoError(t, f.s.handleEvaluations(ctx, queue.NewTasksEvaluateTask(ids)))
		after := statementCounts(t, f.statements)
		require.Equal(t, int64(1), after["StepActionsOfRuns"]-before["StepActionsOfRuns"], "after %s", step.name)
		require.Zero(t, after["StepActions"]-before["StepActions"], "after %s", step.name)
		require.Equal(t, step.creates, after["CreateTasksOfRuns"]-before["CreateTasksOfRuns"], "after %s", step.name)
		require.Equal(t, int64(1), after["UpdateTaskOutcomes"]-before["UpdateTaskOutcomes"], "after %s", step.name)
		require.Zero(t, after["UpdateTaskOutcome"]-before["UpdateTaskOutcome"], "after %s", step.name)
		for _, key := range keys {
			d, err := f.st.Runs().GetRun(ctx, key)
			require.NoError(t, err)
			require.Equal(t, string(step.phase), d.Run.Phase, "%s after %s", key.Run, step.name)
			require.Len(t, f.tasks(t, key, "b"), 1, "%s starts b once", key.Run)
		}
	}
	for _, key := range keys {
		var events string
		require.NoError(t, f.db.QueryRow(`SELECT string_agg(type || coalesce(':' || (data->>'to'), ''), ', ' ORDER BY id)
			FROM run_events WHERE run_name = $1 AND action_name IN ('a', 'b') AND type IN ('task.NO_RETRY', 'action.phase')`,
			key.Run).Scan(&events))
		require.Equal(t, "action.phase:RUNNING, task.NO_RETRY, action.phase:SUCCEEDED, "+
			"action.phase:RUNNING, task.NO_RETRY, action.phase:SUCCEEDED", events, key.Run)
		d, err := f.st.Actions().GetAction(ctx, key.Action("b"))
		require.NoError(t, err)
		require.Equal(t, domain.TaskSucceeded, d.Tasks[0].Task.State)
		require.NotNil(t, d.Tasks[0].Task.EndedAt)
		require.NotNil(t, d.Action.EndedAt)
	}
}

// A failure that ends its action while another attempt of that action
// waits in the same batch cannot be settled with it: the batch rolls back
// and each attempt is evaluated on its own, in order, as two messages
// would have them: the job fails at the first, and the second finds its
// task killed with the other survivors.
func TestHandleEvaluationsSettlesAMovedActionAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	w := f.register(t)
	exit, failed := 0, 1
	tasks := f.startedTasks(t, "split", 2)
	fail := f.attemptIn(t, w, tasks[0], store.Report{State: domain.TaskFailed, ExitCode: &failed}).ID
	ok := f.attemptIn(t, w, tasks[1], store.Report{State: domain.TaskSucceeded, ExitCode: &exit}).ID
	require.NoError(t, f.s.handleEvaluations(ctx, queue.NewTasksEvaluateTask([]int64{fail, ok})))

	first, second := f.attempt(t, fail).EvaluatedAt, f.attempt(t, ok).EvaluatedAt
	require.NotNil(t, first)
	require.NotNil(t, second)
	require.False(t, first.Equal(*second), "each attempt evaluated on its own")
	key := domain.RunKey{Project: "p", Domain: "d", Run: "split"}
	require.Equal(t, string(domain.PhaseFailed), f.action(t, key, "s").Phase)
	states := []domain.TaskState{f.tasks(t, key, "s")[0].Task.State, f.tasks(t, key, "s")[1].Task.State}
	require.ElementsMatch(t, []domain.TaskState{domain.TaskFailed, domain.TaskKilled}, states,
		"the success came after the job failed: its task was a survivor")
}
