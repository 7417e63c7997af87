package scheduler

import (
	"context"
	"fmt"
	"strings"
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
	d, err := f.st.Runs().GetRun(ctx, key)
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

	d, err = f.st.Runs().GetRun(ctx, key)
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

// TestFirstAdvanceAndOneStepEndSaveStatements: a new run's first advance
// expands it and starts its roots in one statement, and its phase move rides
// the events' insert (TryLockRuns, ExpandAndStartRuns, flushEvents), with the events
// the general path writes in its order. A root that waits (a suspend step)
// goes the general path. The evaluation that ends a one-step run decides
// from the step it holds, without reading the run's steps; one that ends a
// step of two reads them.
func TestFirstAdvanceAndOneStepEndSaveStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	ops := func(fn func()) map[string]int64 {
		before := statementCounts(t, f.statements)
		fn()
		after := statementCounts(t, f.statements)
		for op, n := range before {
			if after[op] -= n; after[op] == 0 {
				delete(after, op)
			}
		}
		delete(after, "")
		return after
	}
	runEvents := func(name string) string {
		var s string
		require.NoError(t, f.db.QueryRow(`SELECT string_agg(type || ' ' || coalesce(action_name, '-'), ', ' ORDER BY id)
			FROM run_events WHERE run_name = $1`, name).Scan(&s))
		return s
	}

	key := f.newRun(t, "fresh", domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		{Name: "a", Command: "true"}, {Name: "b", Command: "true"},
		{Name: "c", Command: "true", DependsOn: []string{"a"}}}})
	var adv Advance
	got := ops(func() {
		var err error
		adv, err = f.s.advance(ctx, key)
		require.NoError(t, err)
	})
	require.Equal(t, map[string]int64{"TryLockRuns": 1, "ExpandAndStartRuns": 1, "flushEvents": 1}, got)
	require.Equal(t, []string{"a", "b"}, adv.Started)
	require.Equal(t, domain.PhaseRunning, adv.Phase)
	require.Equal(t, "run.created a0, run.expanded a0, action.started a, action.started b, action.phase a0", runEvents("fresh"))
	for name, n := range map[string]int{"a": 1, "b": 1, "c": 0} {
		require.Len(t, f.tasks(t, key, name), n, name)
		d, err := f.st.Actions().GetAction(ctx, key.Action(name))
		require.NoError(t, err)
		require.Equal(t, n == 1, d.Action.StartedAt != nil, name)
		require.Equal(t, string(domain.PhaseQueued), d.Action.Phase, name)
	}
	adv, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	require.Empty(t, adv.Started, "a later advance starts nothing twice")

	key = f.newRun(t, "waits", domain.WorkflowSpec{Steps: []domain.Step{
		{Name: "hold", Kind: domain.KindSuspend}, {Name: "s", Command: "true"}}})
	got = ops(func() {
		_, err := f.s.advance(ctx, key)
		require.NoError(t, err)
	})
	require.Zero(t, got["ExpandAndStartRuns"], "%v", got)
	require.Equal(t, int64(1), got["ExpandSteps"], "%v", got)

	for _, steps := range [][]domain.Step{{{Name: "s", Command: "true"}},
		{{Name: "s", Command: "true"}, {Name: "t", Command: "true", DependsOn: []string{"s"}}}} {
		key := f.newRun(t, fmt.Sprintf("end-of-%d", len(steps)), domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: steps})
		_, err := f.s.advance(ctx, key)
		require.NoError(t, err)
		var ev Evaluation
		got := ops(func() { ev = f.runAttempt(t, w, f.tasks(t, key, "s")[0].Task.ID, domain.TaskSucceeded, 0) })
		require.NotNil(t, ev.Advance)
		if len(steps) == 1 {
			require.Zero(t, got["StepActions"], "%v", got)
			require.Equal(t, domain.PhaseSucceeded, ev.Advance.Phase)
			d, err := f.st.Runs().GetRun(ctx, key)
			require.NoError(t, err)
			require.Equal(t, string(domain.PhaseSucceeded), d.Run.Phase)
			require.True(t, strings.HasSuffix(runEvents(key.Run), "action.phase s, action.phase a0"), runEvents(key.Run))
			continue
		}
		require.Equal(t, int64(1), got["StepActions"], "%v", got)
		require.Equal(t, []string{"t"}, ev.Advance.Started)
	}
}
