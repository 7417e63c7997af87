package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// CreateTasks starts several steps of a run in one call: each step's
// tasks, its action's started_at and its "action.started" event, in the
// steps' order; a step not named is left alone.
func TestCreateTasksStartsSeveralSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true", Replicas: intp(2)},
		{Name: "b", Command: "true"}, {Name: "c", Command: "true"}}}
	key := newRun(t, st, "fan", spec)
	run := mustRun(t, st, key)
	_, err := st.Runs().ExpandSteps(ctx, key, run.Spec.Steps)
	require.NoError(t, err)
	now := time.Now().UTC()
	started := func(name string) store.StartedStep {
		for _, s := range run.Spec.Steps {
			if s.Name == name {
				tasks := domain.StepTasks(s, domain.DefaultMaxSystemFailures, now)
				return store.StartedStep{Action: name, Tasks: store.NewTaskRows(key.Action(name), 0, tasks)}
			}
		}
		t.Fatalf("no step %s", name)
		return store.StartedStep{}
	}
	require.NoError(t, st.Tasks().CreateTasks(ctx, key, now, started("c"), started("a")))
	require.NoError(t, st.Tasks().CreateTasks(ctx, key, now), "no steps: nothing")

	for name, n := range map[string]int{"a": 2, "b": 0, "c": 1} {
		require.Len(t, tasksOf(t, st, key, name), n, name)
		d, err := st.Actions().GetAction(ctx, key.Action(name))
		require.NoError(t, err)
		require.Equal(t, n > 0, d.Action.StartedAt != nil, name)
	}
	var order []string
	rows, err := db.Query(`SELECT action_name FROM run_events WHERE run_name = $1 AND type = 'action.started' ORDER BY id`, key.Run)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		order = append(order, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"c", "a"}, order)
}
