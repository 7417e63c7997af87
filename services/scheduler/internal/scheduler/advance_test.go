package scheduler

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/stretchr/testify/require"
)

// TestDAGRunToSucceeded drives a DAG run to its end: the first advance
// starts the root; each evaluation that ends a step advances the run in its
// transaction (fan-out, then fan-in); a later advance starts nothing twice.
func TestDAGRunToSucceeded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "dag", domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		{Name: "a", Command: "true"},
		{Name: "c", Command: "true", DependsOn: []string{"a"}},
		{Name: "b", Command: "true", DependsOn: []string{"a"}, Replicas: iptr(2)},
		{Name: "d", Command: "true", DependsOn: []string{"b", "c"}},
	}})

	adv, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, adv.Started, "only the root of the DAG starts")
	require.Equal(t, domain.PhaseRunning, adv.Phase)
	d, err := f.st.GetRun(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "RUNNING", d.Run.Phase)
	require.Nil(t, d.Run.EndedAt)
	require.Equal(t, "RUNNING", d.Actions[0].Action.Phase, "a0 mirrors the run")
	require.Nil(t, d.Actions[0].Action.EndedAt)

	ev := f.runAttempt(t, w, f.tasks(t, key, "a")[0].Task.ID, domain.TaskSucceeded, 0)
	require.NotNil(t, ev.Advance, "a ended: its evaluation advanced the run")
	require.ElementsMatch(t, []string{"b", "c"}, ev.Advance.Started, "fan-out after a")
	require.Len(t, f.tasks(t, key, "b"), 2, "b expands into 2 tasks")
	adv, err = f.s.advance(ctx, key)
	require.NoError(t, err)
	require.Empty(t, adv.Started, "a started step is never started again")

	for _, td := range append(f.tasks(t, key, "b"), f.tasks(t, key, "c")...) {
		ev = f.runAttempt(t, w, td.Task.ID, domain.TaskSucceeded, 0)
	}
	require.NotNil(t, ev.Advance)
	require.Equal(t, []string{"d"}, ev.Advance.Started, "fan-in once b and c succeeded")
	ev = f.runAttempt(t, w, f.tasks(t, key, "d")[0].Task.ID, domain.TaskSucceeded, 0)
	require.NotNil(t, ev.Advance)
	require.Equal(t, domain.PhaseSucceeded, ev.Advance.Phase)
	adv, err = f.s.advance(ctx, key)
	require.NoError(t, err)
	require.Equal(t, domain.PhaseSucceeded, adv.Phase)

	d, err = f.st.GetRun(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "SUCCEEDED", d.Run.Phase)
	require.NotNil(t, d.Run.EndedAt)
	require.NotNil(t, d.Actions[0].Action.EndedAt)
	var names []string
	for _, a := range d.Actions {
		names = append(names, a.Action.Name)
	}
	require.Equal(t, []string{"a0", "a", "c", "b", "d"}, names, "actions in spec order")
	for _, a := range d.Actions {
		require.Equal(t, "SUCCEEDED", a.Action.Phase, a.Action.Name)
	}
}
