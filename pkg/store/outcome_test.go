package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// A task's outcome that carries its action's move writes both in one
// statement: the task ends, the action moves (ended when terminal), and the
// events come in that order. A move from a phase the action is not in
// changes nothing of the action. A requeue puts the task back to PENDING,
// off its worker, placeable from not_before.
func TestUpdateTaskOutcomeCarriesTheActionsMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	w := registerWorker(t, st)
	exit := 0
	finished := func(name string) (domain.RunKey, store.Attempt, domain.Phase) {
		key := newRun(t, st, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}})
		storetest.StartSteps(t, st, key)
		a := attemptIn(t, st, w, tasksOf(t, st, key, "s")[0].Task.ID, running,
			store.Report{State: domain.TaskSucceeded, ExitCode: &exit})
		d, err := st.Actions().GetAction(ctx, key.Action("s"))
		require.NoError(t, err)
		return key, a, domain.Phase(d.Action.Phase)
	}

	key, a, from := finished("moves")
	applyOutcome(t, st, a.ID, store.TaskOutcome{State: domain.TaskSucceeded, Result: "succeeded",
		Phase: &store.PhaseMove{From: from, To: domain.PhaseSucceeded}})
	d, err := st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	require.Equal(t, domain.TaskSucceeded, d.Tasks[0].Task.State)
	require.NotNil(t, d.Tasks[0].Task.EndedAt)
	require.Equal(t, string(domain.PhaseSucceeded), d.Action.Phase)
	require.NotNil(t, d.Action.EndedAt)
	evs := events(t, db, key)
	require.Equal(t, []string{"task.succeeded", "action.phase"}, evs[len(evs)-2:])

	key, a, _ = finished("stays")
	applyOutcome(t, st, a.ID, store.TaskOutcome{State: domain.TaskSucceeded, Result: "succeeded",
		Phase: &store.PhaseMove{From: domain.PhasePaused, To: domain.PhaseSucceeded}})
	d, err = st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	require.Equal(t, domain.TaskSucceeded, d.Tasks[0].Task.State)
	require.NotEqual(t, string(domain.PhaseSucceeded), d.Action.Phase, "not in the move's from phase")
	require.Nil(t, d.Action.EndedAt)
	evs = events(t, db, key)
	require.Equal(t, "task.succeeded", evs[len(evs)-1], "no action.phase after the outcome")

	key, a, _ = finished("requeued")
	notBefore := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	applyOutcome(t, st, a.ID, store.TaskOutcome{Budget: domain.Budget{FailureCount: 1}, Requeue: true,
		NotBefore: notBefore, Result: "retried"})
	d, err = st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	task := d.Tasks[0].Task
	require.Equal(t, domain.TaskPending, task.State)
	require.Nil(t, task.WorkerID)
	require.Nil(t, task.EndedAt)
	require.Equal(t, 1, task.FailureCount)
	require.NotNil(t, task.NotBefore)
	require.True(t, notBefore.Equal(*task.NotBefore))
}

// UpdateTaskOutcomes writes several outcomes as UpdateTaskOutcome writes
// each, in one statement: both tasks end; the action whose move starts
// from its phase moves (ended), the other stays; the events come in the
// outcomes' order. An outcome that requeues is refused, and nothing of the
// batch is written.
func TestUpdateTaskOutcomesWritesEachAsOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	w := registerWorker(t, st)
	exit := 0
	var ws []store.OutcomeWrite
	var keys []domain.RunKey
	for i, name := range []string{"moves", "stays"} {
		key := newRun(t, st, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}})
		storetest.StartSteps(t, st, key)
		a := attemptIn(t, st, w, tasksOf(t, st, key, "s")[0].Task.ID, running,
			store.Report{State: domain.TaskSucceeded, ExitCode: &exit})
		d, err := st.Actions().GetAction(ctx, key.Action("s"))
		require.NoError(t, err)
		from := domain.Phase(d.Action.Phase)
		if i == 1 {
			from = domain.PhasePaused
		}
		ws = append(ws, store.OutcomeWrite{T: d.Tasks[0].Task, A: a, O: store.TaskOutcome{State: domain.TaskSucceeded,
			Budget: domain.Budget{FailureCount: 2}, Result: "succeeded",
			Phase: &store.PhaseMove{From: from, To: domain.PhaseSucceeded}}})
		keys = append(keys, key)
	}
	requeue := store.OutcomeWrite{T: ws[0].T, A: ws[0].A, O: store.TaskOutcome{Requeue: true, Result: "retried"}}
	err := st.InTx(ctx, func(tx *store.Store) error {
		return tx.Tasks().UpdateTaskOutcomes(ctx, time.Now().UTC(), append(slices.Clone(ws), requeue)...)
	})
	require.ErrorIs(t, err, store.ErrBadOutcome)
	require.Equal(t, domain.TaskRunning, tasksOf(t, st, keys[0], "s")[0].Task.State, "nothing written")

	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return tx.Tasks().UpdateTaskOutcomes(ctx, time.Now().UTC(), ws...)
	}))
	for i, key := range keys {
		d, err := st.Actions().GetAction(ctx, key.Action("s"))
		require.NoError(t, err)
		task := d.Tasks[0].Task
		require.Equal(t, domain.TaskSucceeded, task.State, key.Run)
		require.NotNil(t, task.EndedAt, key.Run)
		require.Equal(t, 2, task.FailureCount, key.Run)
		evs := events(t, db, key)
		if i == 0 {
			require.Equal(t, string(domain.PhaseSucceeded), d.Action.Phase)
			require.NotNil(t, d.Action.EndedAt)
			require.Equal(t, []string{"task.succeeded", "action.phase"}, evs[len(evs)-2:])
			continue
		}
		require.NotEqual(t, string(domain.PhaseSucceeded), d.Action.Phase, "not in the move's from phase")
		require.Nil(t, d.Action.EndedAt)
		require.Equal(t, "task.succeeded", evs[len(evs)-1], "no action.phase after the outcome")
	}
}
