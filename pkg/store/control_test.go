package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// twoSteps is a StepByStep workflow of two task steps, a and b.
func twoSteps() domain.WorkflowSpec {
	return domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true"}, {Name: "b", Command: "true"}}}
}

// events returns the types of the run's run_events rows, oldest first.
func events(t *testing.T, db *sql.DB, key domain.RunKey) []string {
	t.Helper()
	rows, err := db.Query(`SELECT type FROM run_events WHERE project = $1 AND domain = $2 AND run_name = $3 ORDER BY id`,
		key.Project, key.Domain, key.Run)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		out = append(out, typ)
	}
	require.NoError(t, rows.Err())
	return out
}

// A suspend sets suspend_requested_at (once: a second keeps the first time);
// a resume clears it and stamps resume_requested_at; each writes its event
// and bumps the run's version. An ended run refuses both.
func TestRequestSuspendAndResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	key := newRun(t, st, "r", twoSteps())
	storetest.StartSteps(t, st, key, "a")

	run, _, err := st.Runs().RequestSuspend(ctx, key)
	require.NoError(t, err)
	require.NotNil(t, run.SuspendRequestedAt)
	first := *run.SuspendRequestedAt
	again, _, err := st.Runs().RequestSuspend(ctx, key)
	require.NoError(t, err)
	require.True(t, first.Equal(*again.SuspendRequestedAt), "a second suspend keeps the first's time")
	got, err := st.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	require.True(t, first.Equal(*got.Run.SuspendRequestedAt))
	require.Equal(t, again.Version, got.Run.Version)
	require.Nil(t, got.Run.ResumeRequestedAt)

	run, _, err = st.Runs().RequestResume(ctx, key)
	require.NoError(t, err)
	require.Nil(t, run.SuspendRequestedAt)
	require.NotNil(t, run.ResumeRequestedAt)
	got, err = st.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	require.Nil(t, got.Run.SuspendRequestedAt)
	require.True(t, run.ResumeRequestedAt.Equal(*got.Run.ResumeRequestedAt))
	require.Equal(t, string(domain.PhaseRunning), got.Run.Phase, "the store records the intent only")
	require.Subset(t, events(t, db, key), []string{"run.suspend_requested", "run.resume_requested"})

	_, err = st.Aborts().AbortAction(ctx, key.Action(domain.RootActionName), "stop", store.CauseAborted)
	require.NoError(t, err)
	_, _, err = st.Runs().RequestSuspend(ctx, key)
	require.ErrorIs(t, err, store.ErrTerminal)
	_, _, err = st.Runs().RequestResume(ctx, key)
	require.ErrorIs(t, err, store.ErrTerminal)
	_, _, err = st.Runs().RequestSuspend(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "ghost"})
	require.ErrorIs(t, err, store.ErrNotFound)
}

// waitForApproval makes step name of key an approval step that waits, as
// the scheduler leaves one: set-up only.
func waitForApproval(t *testing.T, db *sql.DB, key domain.RunKey, name string) {
	t.Helper()
	_, err := db.Exec(`UPDATE actions SET kind = 'approval', phase = 'PAUSED', waiting_for = 'approval', paused_at = now()
		WHERE project = $1 AND domain = $2 AND run_name = $3 AND name = $4`, key.Project, key.Domain, key.Run, name)
	require.NoError(t, err)
}

// RecordApproval writes a decision with who (the token, and the label),
// when and the comment on the action as locked, and its event, and returns
// the action as written; it moves no phase. (Whether a decision may be
// recorded is domain.CheckApproval's, composed by the api.)
func TestRecordApproval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	record := func(key domain.ActionKey, decision string, by store.Decider, comment string) store.Action {
		t.Helper()
		var act store.Action
		require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
			_, locked, err := tx.Actions().LockRunAction(ctx, key)
			if err != nil {
				return err
			}
			act, err = tx.Actions().RecordApproval(ctx, locked, decision, by, comment)
			return err
		}))
		return act
	}
	key := newRun(t, st, "r", twoSteps())
	storetest.StartSteps(t, st, key, "a")
	waitForApproval(t, db, key, "b")

	before := time.Now().UTC()
	a := record(key.Action("b"), domain.DecisionApproved, store.Decider{TokenID: "t-1", TokenName: "ops", Label: "ann"},
		"looks good")
	got, err := st.Actions().GetAction(ctx, key.Action("b"))
	require.NoError(t, err)
	for _, act := range []store.Action{a, got.Action} {
		require.Equal(t, domain.DecisionApproved, *act.Decision)
		require.Equal(t, "ann", *act.DecidedBy)
		require.Equal(t, "t-1", *act.DecidedByTokenID)
		require.Equal(t, "ops", *act.DecidedByTokenName)
		require.Equal(t, "looks good", *act.DecisionComment)
		require.WithinDuration(t, before, *act.DecidedAt, time.Minute)
		require.Equal(t, string(domain.PhasePaused), act.Phase, "the scheduler moves the phase")
	}
	require.Equal(t, a.Version, got.Action.Version)
	require.Contains(t, events(t, db, key), "action.approved")
	var data string
	require.NoError(t, db.QueryRow(`SELECT data FROM run_events WHERE run_name = $1 AND type = 'action.approved'`,
		key.Run).Scan(&data))
	require.JSONEq(t, `{"by": "ann", "token_id": "t-1", "token_name": "ops", "comment": "looks good"}`, data)

	other := newRun(t, st, "r2", twoSteps())
	storetest.StartSteps(t, st, other, "a")
	waitForApproval(t, db, other, "b")
	r := record(other.Action("b"), domain.DecisionRejected, store.Decider{}, "")
	require.Equal(t, domain.DecisionRejected, *r.Decision)
	require.Nil(t, r.DecidedBy, "nobody named")
	require.Nil(t, r.DecidedByTokenID)
	require.Nil(t, r.DecisionComment)
	require.Contains(t, events(t, db, other), "action.rejected")
}

// A restart is recorded only for a run that ended in failure, with no abort
// still being delivered, from a step of its spec.
func TestRequestRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	key := newRun(t, st, "r", twoSteps())
	storetest.StartSteps(t, st, key, "a")

	_, err := st.Runs().RequestRestart(ctx, key, "")
	require.ErrorIs(t, err, store.ErrNotRestartable, "a running run")
	_, err = st.Aborts().AbortAction(ctx, key.Action(domain.RootActionName), "stop", store.CauseAborted)
	require.NoError(t, err)
	_, err = st.Runs().RequestRestart(ctx, key, "")
	require.ErrorIs(t, err, store.ErrAbortPending)
	require.NoError(t, st.Aborts().ClearAbortRequest(ctx, key.Action(domain.RootActionName), store.AbortDelivered))
	_, err = st.Runs().RequestRestart(ctx, key, "zz")
	require.ErrorIs(t, err, store.ErrUnknownStep)
	_, err = st.Runs().RequestRestart(ctx, key, domain.RootActionName)
	require.ErrorIs(t, err, store.ErrUnknownStep, "a0 is not a step")

	run, err := st.Runs().RequestRestart(ctx, key, "b")
	require.NoError(t, err)
	require.NotNil(t, run.RestartRequestedAt)
	require.Equal(t, "b", *run.RestartFrom)
	run, err = st.Runs().RequestRestart(ctx, key, "")
	require.NoError(t, err, "a second request replaces the first")
	got, err := st.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	require.Nil(t, got.Run.RestartFrom, "every step that did not succeed")
	require.True(t, run.RestartRequestedAt.Equal(*got.Run.RestartRequestedAt))
	require.Equal(t, string(domain.PhaseAborted), got.Run.Phase, "the scheduler moves the phase")
	require.Contains(t, events(t, db, key), "run.restart_requested")
	pending, err := st.Runs().RestartRequestedRuns(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{key}, pending, "what the scheduler's resync advances")

	done := newRun(t, st, "done", twoSteps())
	require.NoError(t, st.Runs().SetRunPhase(ctx, done, domain.PhaseSucceeded, time.Now().UTC()))
	_, err = st.Runs().RequestRestart(ctx, done, "")
	require.ErrorIs(t, err, store.ErrNotRestartable, "a run that succeeded")
	failed := newRun(t, st, "failed", twoSteps())
	for _, p := range []domain.Phase{domain.PhaseFailed, domain.PhaseTimedOut, domain.PhaseUnschedulable, domain.PhaseWorkerFailed} {
		require.NoError(t, st.Runs().SetRunPhase(ctx, failed, p, time.Now().UTC()))
		_, err = st.Runs().RequestRestart(ctx, failed, "a")
		require.NoError(t, err, p)
	}
	_, err = st.Runs().RequestRestart(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "ghost"}, "")
	require.ErrorIs(t, err, store.ErrNotFound)
}
