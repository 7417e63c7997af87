package store_test

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// runningAttempts starts a one-step run of replicas tasks and runs each on w.
func runningAttempts(t *testing.T, st *store.Store, w store.Worker, name string, replicas int) (domain.RunKey, []store.Attempt) {
	t.Helper()
	ctx := context.Background()
	key := newRun(t, st, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Replicas: intp(replicas)}}})
	storetest.StartSteps(t, st, key)
	var out []store.Attempt
	for _, td := range tasksOf(t, st, key, "s") {
		a, ok, err := storetest.AssignTask(ctx, st, td.Task.ID, w.ID)
		require.NoError(t, err)
		require.True(t, ok)
		_, err = storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: domain.TaskRunning})
		require.NoError(t, err)
		out = append(out, a)
	}
	return key, out
}

// A timeout uses the abort path but ends the subtree TIMED_OUT (Iris's
// derivation as Capstan maps it onto phases: any KILLED → ABORTED, or
// TIMED_OUT when the kill was a timeout).
func TestAbortActionCause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	for _, tc := range []struct {
		cause, wantCause string
		want             domain.Phase
	}{
		{"", store.CauseAborted, domain.PhaseAborted},
		{store.CauseAborted, store.CauseAborted, domain.PhaseAborted},
		{store.CauseTimeout, store.CauseTimeout, domain.PhaseTimedOut},
	} {
		key, _ := runningAttempts(t, st, w, "cause-"+tc.wantCause+"-"+tc.cause, 1)
		a, err := st.Aborts().AbortAction(ctx, key.Action("a0"), "why", tc.cause)
		require.NoError(t, err)
		require.Equal(t, string(tc.want), a.Phase)
		require.Equal(t, tc.wantCause, *a.AbortCause)
		run, err := st.Runs().GetRun(ctx, key)
		require.NoError(t, err)
		require.Equal(t, string(tc.want), run.Run.Phase, "the run mirrors a0")
		for _, ad := range run.Actions {
			require.Equal(t, string(tc.want), ad.Action.Phase, ad.Action.Name)
			for _, td := range ad.Tasks {
				require.Equal(t, domain.TaskKilled, td.Task.State)
			}
		}
		root, err := st.Actions().GetAction(ctx, key.Action("a0"))
		require.NoError(t, err)
		require.Equal(t, tc.wantCause, *root.Action.AbortCause)
		require.NotNil(t, root.Action.AbortRequestedAt)
	}
	key, _ := runningAttempts(t, st, w, "cause-bad", 1)
	_, err := st.Aborts().AbortAction(ctx, key.Action("a0"), "why", store.CausePreempted)
	require.ErrorIs(t, err, domain.ErrBadCause, "an action is aborted or timed out, never preempted")
	d, err := st.Actions().GetAction(ctx, key.Action("a0"))
	require.NoError(t, err)
	require.Nil(t, d.Action.AbortRequestedAt, "a refused abort writes nothing")
}

func TestAttemptKillLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	_, ats := runningAttempts(t, st, w, "kill", 2)
	id := ats[0].ID

	_, err := st.Aborts().MarkKillAttempt(ctx, id)
	require.ErrorIs(t, err, store.ErrNotFound, "no kill pending yet")
	require.ErrorIs(t, st.Aborts().RequestAttemptKill(ctx, id, "bored"), domain.ErrBadCause)
	require.ErrorIs(t, st.Aborts().RequestAttemptKill(ctx, 1<<40, store.CausePreempted), store.ErrNotFound)

	// Inside the caller's transaction, and rolled back with it.
	require.Error(t, st.InTx(ctx, func(tx *store.Store) error {
		require.NoError(t, tx.Aborts().RequestAttemptKill(ctx, id, store.CausePreempted))
		return context.Canceled
	}))
	pending, err := st.Aborts().ListPendingKills(ctx)
	require.NoError(t, err)
	require.Empty(t, pending)

	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return tx.Aborts().RequestAttemptKill(ctx, id, store.CausePreempted)
	}))
	require.NoError(t, st.Aborts().RequestAttemptKill(ctx, id, store.CauseTimeout), "a pending kill is left as it is")
	pending, err = st.Aborts().ListPendingKills(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{id}, pending)

	for want := 1; want <= 3; want++ {
		n, err := st.Aborts().MarkKillAttempt(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, n)
	}
	kt, err := st.Aborts().GetKillTarget(ctx, id)
	require.NoError(t, err)
	require.True(t, kt.Live)
	require.Equal(t, store.CausePreempted, kt.Cause, "the first request's cause stands")
	require.NotNil(t, kt.RequestedAt)
	require.Equal(t, w.Address, *kt.Address)

	recs, _, err := st.Aborts().ListAborts(ctx, store.AbortFilter{State: store.AbortStatePending})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "attempt", recs[0].Kind)
	require.Equal(t, id, *recs[0].AttemptID)
	require.Equal(t, 3, recs[0].AttemptCount)
	require.Equal(t, store.CausePreempted, recs[0].Cause)

	require.NoError(t, st.Aborts().ClearKillRequest(ctx, id, store.AbortNeedsIntervention))
	require.NoError(t, st.Aborts().ClearKillRequest(ctx, id, store.AbortDelivered), "a cleared kill stays cleared")
	pending, err = st.Aborts().ListPendingKills(ctx)
	require.NoError(t, err)
	require.Empty(t, pending)
	recs, _, err = st.Aborts().ListAborts(ctx, store.AbortFilter{State: store.AbortStateNeedsIntervention})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, store.AbortNeedsIntervention, *recs[0].Outcome)
	require.Nil(t, recs[0].RequestedAt)
	require.Equal(t, 3, recs[0].AttemptCount, "the count is kept for the operator")

	// An attempt that already ended has nothing to kill.
	exit := 0
	_, err = storetest.ReportAttempt(ctx, st, ats[1].ID, store.Report{State: domain.TaskSucceeded, ExitCode: &exit})
	require.NoError(t, err)
	require.ErrorIs(t, st.Aborts().RequestAttemptKill(ctx, ats[1].ID, store.CausePreempted), store.ErrTerminal)
}

// An attempt whose kill finds it gone ends in its cause's state; the
// scheduler must evaluate it when it is still its task's current attempt.
func TestMarkKillGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	for cause, want := range map[string]domain.TaskState{
		store.CausePreempted:  domain.TaskPreempted,
		store.CauseWorkerLost: domain.TaskWorkerFailed,
		store.CauseTimeout:    domain.TaskKilled,
	} {
		key, ats := runningAttempts(t, st, w, "gone-"+cause, 1)
		require.NoError(t, st.Aborts().RequestAttemptKill(ctx, ats[0].ID, cause))
		evaluate, err := st.Aborts().MarkKillGone(ctx, ats[0].ID, cause)
		require.NoError(t, err)
		require.True(t, evaluate, "the task still runs this attempt: the scheduler decides")
		at := tasksOf(t, st, key, "s")[0].Attempts[0]
		require.Equal(t, want, at.State, cause)
		require.Equal(t, cause, *at.Cause)
		require.NotNil(t, at.FinishedAt)
		require.Nil(t, at.EvaluatedAt)
		evaluate, err = st.Aborts().MarkKillGone(ctx, ats[0].ID, cause)
		require.NoError(t, err)
		require.False(t, evaluate, "an ended attempt is left alone")
	}

	// The task moved on (aborted): nothing to evaluate.
	key, ats := runningAttempts(t, st, w, "gone-aborted", 1)
	require.NoError(t, st.Aborts().RequestAttemptKill(ctx, ats[0].ID, store.CausePreempted))
	_, err := st.Aborts().AbortAction(ctx, key.Action("a0"), "stop", "")
	require.NoError(t, err)
	evaluate, err := st.Aborts().MarkKillGone(ctx, ats[0].ID, store.CausePreempted)
	require.NoError(t, err)
	require.False(t, evaluate)
	require.NotNil(t, tasksOf(t, st, key, "s")[0].Attempts[0].EvaluatedAt)
}

// The aborts list pages through action aborts and attempt kills by state.
func TestListAborts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	var keys []domain.ActionKey
	for _, name := range []string{"l1", "l2", "l3"} {
		key, _ := runningAttempts(t, st, w, name, 1)
		_, err := st.Aborts().AbortAction(ctx, key.Action("a0"), "reason "+name, "")
		require.NoError(t, err)
		keys = append(keys, key.Action("a0"))
	}
	require.NoError(t, st.Aborts().ClearAbortRequest(ctx, keys[0], store.AbortNeedsIntervention))
	require.NoError(t, st.Aborts().ClearAbortRequest(ctx, keys[1], store.AbortDelivered))

	byState := func(state string) []string {
		t.Helper()
		var out []string
		cursor := ""
		for {
			recs, next, err := st.Aborts().ListAborts(ctx, store.AbortFilter{State: state, Limit: 1, Cursor: cursor})
			require.NoError(t, err)
			for _, r := range recs {
				out = append(out, r.RunName)
			}
			if next == "" {
				return out
			}
			cursor = next
		}
	}
	require.Equal(t, []string{"l1"}, byState(store.AbortStateNeedsIntervention))
	require.Equal(t, []string{"l2"}, byState(store.AbortStateDelivered))
	require.Equal(t, []string{"l3"}, byState(store.AbortStatePending))
	require.ElementsMatch(t, []string{"l1", "l2", "l3"}, byState(""))
	_, _, err := st.Aborts().ListAborts(ctx, store.AbortFilter{Cursor: "%%%"})
	require.ErrorIs(t, err, store.ErrBadCursor)
	_, _, err = st.Aborts().ListAborts(ctx, store.AbortFilter{State: "lost"})
	require.Error(t, err)
}
