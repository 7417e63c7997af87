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
			d, err := f.st.GetRun(ctx, key)
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

// A tasks:evaluate message evaluates its SUCCEEDED attempts, one a run,
// together in one transaction (they share one evaluated_at), and every
// other attempt on its own after: a failure (its run fails), a second
// attempt of a run. Each run of one step ends SUCCEEDED with its task.
func TestHandleEvaluationsEvaluatesSucceededTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	w := f.register(t)
	exit, failed := 0, 1
	ok := store.Report{State: domain.TaskSucceeded, ExitCode: &exit}
	var together []int64
	var keys []domain.RunKey
	for i := range 4 {
		taskID := f.startedTasks(t, fmt.Sprintf("ok%d", i), 1)[0]
		keys = append(keys, domain.RunKey{Project: "p", Domain: "d", Run: fmt.Sprintf("ok%d", i)})
		together = append(together, f.attemptIn(t, w, taskID, store.Report{State: domain.TaskRunning}, ok).ID)
	}
	pair := f.startedTasks(t, "pair", 2)
	first := f.attemptIn(t, w, pair[0], ok).ID
	second := f.attemptIn(t, w, pair[1], ok).ID
	fail := f.attemptIn(t, w, f.startedTasks(t, "fail", 1)[0],
		store.Report{State: domain.TaskFailed, ExitCode: &failed}).ID
	ids := append([]int64{fail, second}, together...)
	ids = append(ids, first, 999999)
	require.NoError(t, f.s.handleEvaluations(ctx, queue.NewTasksEvaluateTask(ids)))

	at := f.attempt(t, together[0]).EvaluatedAt
	require.NotNil(t, at)
	for _, id := range append(together[1:], first) {
		got := f.attempt(t, id).EvaluatedAt
		require.NotNil(t, got, "attempt %d evaluated", id)
		require.True(t, at.Equal(*got), "attempt %d evaluated with the others: %s, %s", id, got, at)
	}
	for _, id := range []int64{second, fail} {
		got := f.attempt(t, id).EvaluatedAt
		require.NotNil(t, got, "attempt %d evaluated", id)
		require.False(t, at.Equal(*got), "attempt %d evaluated on its own", id)
	}
	for _, key := range append(keys, domain.RunKey{Project: "p", Domain: "d", Run: "pair"}) {
		d, err := f.st.GetRun(ctx, key)
		require.NoError(t, err)
		require.Equal(t, string(domain.PhaseSucceeded), d.Run.Phase, key.Run)
		require.NotNil(t, d.Run.EndedAt, key.Run)
	}
	failedKey := domain.RunKey{Project: "p", Domain: "d", Run: "fail"}
	require.Equal(t, domain.TaskFailed, f.tasks(t, failedKey, "s")[0].Task.State)
	d, err := f.st.GetRun(ctx, failedKey)
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseFailed), d.Run.Phase)
}
