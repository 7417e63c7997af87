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
		d, err := st.GetAction(ctx, key.Action("s"))
		require.NoError(t, err)
		return key, a, domain.Phase(d.Action.Phase)
	}

	key, a, from := finished("moves")
	applyOutcome(t, st, a.ID, store.TaskOutcome{State: domain.TaskSucceeded, Result: "succeeded",
		Phase: &store.PhaseMove{From: from, To: domain.PhaseSucceeded}})
	d, err := st.GetAction(ctx, key.Action("s"))
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
	d, err = st.GetAction(ctx, key.Action("s"))
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
	d, err = st.GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	task := d.Tasks[0].Task
	require.Equal(t, domain.TaskPending, task.State)
	require.Nil(t, task.WorkerID)
	require.Nil(t, task.EndedAt)
	require.Equal(t, 1, task.FailureCount)
	require.NotNil(t, task.NotBefore)
	require.True(t, notBefore.Equal(*task.NotBefore))
}

// The reads a task's outcome asks for are the rows as the outcome left
// them: the task counted in its new state, the action's move in its step.
func TestUpdateTaskOutcomeReadsAsItWrote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	w := registerWorker(t, st)
	exit := 0
	succeeded := store.Report{State: domain.TaskSucceeded, ExitCode: &exit}
	key := newRun(t, st, "reads", domain.WorkflowSpec{Steps: []domain.Step{
		{Name: "s", Command: "true", Replicas: intp(2)}, {Name: "u", Command: "true"}}})
	storetest.StartSteps(t, st, key, "s", "u")
	outcome := func(step string, o store.TaskOutcome) store.OutcomeReads {
		t.Helper()
		a := attemptIn(t, st, w, tasksOf(t, st, key, step)[0].Task.ID, running, succeeded)
		var reads store.OutcomeReads
		require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
			owners, claimed, ok, err := tx.LockAndClaimAttempt(ctx, a.ID, time.Now().UTC())
			require.True(t, ok)
			if err != nil {
				return err
			}
			if o.Phase != nil {
				o.Phase.From = domain.Phase(owners.Action.Phase)
			}
			reads, err = tx.UpdateTaskOutcome(ctx, owners.Task, claimed, o, time.Now().UTC())
			return err
		}))
		return reads
	}
	phases := func(steps []store.Action) map[string]string {
		out := map[string]string{}
		for _, a := range steps {
			out[a.Name] = a.Phase
		}
		return out
	}

	gen := tasksOf(t, st, key, "s")[0].Task.Generation
	reads := outcome("s", store.TaskOutcome{State: domain.TaskSucceeded, Result: "succeeded", CountGeneration: &gen})
	require.Equal(t, map[domain.TaskState]int{domain.TaskSucceeded: 1, domain.TaskPending: 1}, nonZero(reads.Counts))
	require.Nil(t, reads.Steps, "not asked")

	reads = outcome("u", store.TaskOutcome{State: domain.TaskSucceeded, Result: "succeeded", ReadSteps: true,
		Phase: &store.PhaseMove{To: domain.PhaseSucceeded}})
	require.Nil(t, reads.Counts, "not asked")
	d, err := st.GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"s": d.Action.Phase, "u": string(domain.PhaseSucceeded)}, phases(reads.Steps))
}

func nonZero(m map[domain.TaskState]int) map[domain.TaskState]int {
	out := map[domain.TaskState]int{}
	for k, n := range m {
		if n != 0 {
			out[k] = n
		}
	}
	return out
}
