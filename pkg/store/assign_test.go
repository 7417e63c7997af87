package store_test

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

func TestAssignTasksBindsABatchInOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	w1, w2 := registerWorker(t, st), registerWorker(t, st)
	a := newRun(t, st, "a", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: intp(2)}}})
	b := newRun(t, st, "b", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}})
	for _, k := range []domain.RunKey{a, b} {
		storetest.StartSteps(t, st, k)
	}
	ta, tb := tasksOf(t, st, a, "s"), tasksOf(t, st, b, "s")
	_, ok, err := storetest.AssignTask(ctx, st, ta[0].Task.ID, w1.ID)
	require.NoError(t, err)
	require.True(t, ok)

	got, err := st.Placement().AssignTasks(ctx, []store.Assignment{{TaskID: tb[0].Task.ID, WorkerID: w2.ID},
		{TaskID: ta[0].Task.ID, WorkerID: w2.ID}, {TaskID: ta[1].Task.ID, WorkerID: w1.ID}})
	require.NoError(t, err)
	require.Len(t, got, 2, "a task no longer PENDING is left alone")
	byTask := map[int64]store.Assigned{got[0].TaskID: got[0], got[1].TaskID: got[1]}
	require.Equal(t, w1.ID, *byTask[ta[1].Task.ID].WorkerID)
	require.Equal(t, w2.ID, *byTask[tb[0].Task.ID].WorkerID)
	for _, at := range got {
		require.Equal(t, domain.TaskAssigned, at.State)
		require.Equal(t, 1, at.Number)
		require.False(t, at.CreatedAt.IsZero())
	}
	// Each comes with what its executor needs beyond the row: the task's
	// index and the step as its action holds it.
	require.Equal(t, 1, byTask[ta[1].Task.ID].TaskIdx)
	require.Equal(t, 0, byTask[tb[0].Task.ID].TaskIdx)
	require.Equal(t, 2, byTask[ta[1].Task.ID].Step.ReplicaCount())
	require.Equal(t, 1, byTask[tb[0].Task.ID].Step.ReplicaCount())
	require.Equal(t, "true", byTask[tb[0].Task.ID].Step.Command)
	require.Equal(t, b.Action("s"), byTask[tb[0].Task.ID].Action())
	require.Equal(t, a.Action("s"), byTask[ta[1].Task.ID].Action())

	for _, k := range []domain.RunKey{a, b} {
		d, err := st.Actions().GetAction(ctx, k.Action("s"))
		require.NoError(t, err)
		require.Equal(t, string(domain.PhaseRunning), d.Action.Phase)
		for _, td := range d.Tasks {
			require.Equal(t, domain.TaskAssigned, td.Task.State)
			require.Equal(t, 1, td.Task.AttemptCount)
			require.Len(t, td.Attempts, 1)
		}
	}
	require.Equal(t, w1.ID, *tasksOf(t, st, a, "s")[0].Task.WorkerID, "the earlier assignment stands")
	var events int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM run_events WHERE type = 'task.assigned'
		AND data->>'worker_id' IS NOT NULL AND attempt_id IS NOT NULL`).Scan(&events))
	require.Equal(t, 3, events, "one task.assigned event per attempt")

	none, err := st.Placement().AssignTasks(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}
