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
