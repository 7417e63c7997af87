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

// Entries list newest first in pages with each key's reservation; a
// deleted entry is gone and a second delete is ErrNotFound.
func TestCacheEntriesListPagesAndEvict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	key := newRun(t, st, "r", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x"}}})
	storetest.StartSteps(t, st, key)
	base := time.Now().UTC().Truncate(time.Millisecond)
	for i, k := range []string{"k1", "k2", "k3"} {
		exp := base.Add(time.Hour)
		require.NoError(t, st.Cache().PutCacheEntry(ctx, store.CacheEntry{Project: "p", Domain: "d", Key: k, Version: "v1",
			RunName: "r", ActionName: "s", Outputs: map[string]string{"n": k}, ExpiresAt: &exp},
			base.Add(time.Duration(i)*time.Second)))
	}
	ok, err := st.Cache().ReserveCache(ctx, key.Action("s"), "k2", base.Add(time.Minute), base)
	require.NoError(t, err)
	require.True(t, ok)

	page, next, err := st.Cache().ListCacheEntries(ctx, store.CacheFilter{Project: "p", Domain: "d", Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, "k3", page[0].Key)
	require.Equal(t, "k2", page[1].Key)
	require.Equal(t, map[string]string{"n": "k2"}, page[1].Outputs)
	require.Nil(t, page[0].Reservation)
	require.NotNil(t, page[1].Reservation)
	require.Equal(t, "s", page[1].Reservation.ActionName)
	require.NotEmpty(t, next)
	page, next, err = st.Cache().ListCacheEntries(ctx, store.CacheFilter{Project: "p", Domain: "d", Limit: 2, Cursor: next})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "k1", page[0].Key)
	require.Empty(t, next)
	_, _, err = st.Cache().ListCacheEntries(ctx, store.CacheFilter{Project: "p", Domain: "d", Cursor: "nope!"})
	require.ErrorIs(t, err, store.ErrBadCursor)
	other, _, err := st.Cache().ListCacheEntries(ctx, store.CacheFilter{Project: "p", Domain: "other"})
	require.NoError(t, err)
	require.Empty(t, other, "entries are scoped to their domain")

	require.NoError(t, st.Cache().DeleteCacheEntry(ctx, "p", "d", "k2"))
	require.ErrorIs(t, st.Cache().DeleteCacheEntry(ctx, "p", "d", "k2"), store.ErrNotFound)
	_, err = st.Cache().GetCacheEntry(ctx, "p", "d", "k2")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// A reservation is its owner's until released, expired or its owner ended;
// then another action takes it over.
func TestCacheReservationTakeOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x"}}}
	a := newRun(t, st, "a", spec).Action("s")
	b := newRun(t, st, "b", spec).Action("s")
	storetest.StartSteps(t, st, a.RunKey)
	storetest.StartSteps(t, st, b.RunKey)
	now := time.Now().UTC()
	reserve := func(owner domain.ActionKey, at time.Time) bool {
		ok, err := st.Cache().ReserveCache(ctx, owner, "k", at.Add(3*time.Second), at)
		require.NoError(t, err)
		return ok
	}
	require.True(t, reserve(a, now))
	require.False(t, reserve(b, now), "a holds it")
	require.True(t, reserve(a, now), "its owner takes it again")
	released, err := st.Cache().ReleaseCache(ctx, b, "k", "failed")
	require.NoError(t, err)
	require.False(t, released, "only the owner releases")
	require.True(t, reserve(b, now.Add(4*time.Second)), "expired: taken over")
	require.False(t, reserve(a, now.Add(4*time.Second)))

	_, err = st.Aborts().AbortAction(ctx, b, "test", "")
	require.NoError(t, err)
	require.True(t, reserve(a, now.Add(5*time.Second)), "an ended owner holds nothing")
	released, err = st.Cache().ReleaseCache(ctx, a, "k", "succeeded")
	require.NoError(t, err)
	require.True(t, released)
	require.True(t, reserve(b, now), "a released key is free")
}

// The liveness pass extends a reservation while its owner has a PENDING
// task or a live attempt on a heartbeating worker, not once it ended.
func TestExtendCacheReservations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	key := newRun(t, st, "r", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x"}}})
	storetest.StartSteps(t, st, key)
	now := time.Now().UTC()
	ok, err := st.Cache().ReserveCache(ctx, key.Action("s"), "k", now.Add(time.Second), now)
	require.NoError(t, err)
	require.True(t, ok)
	n, err := st.Cache().ExtendCacheReservations(ctx, now.Add(-3*time.Second), now.Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a PENDING task keeps it")

	a, ok, err := storetest.AssignTask(ctx, st, tasksOf(t, st, key, "s")[0].Task.ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	n, err = st.Cache().ExtendCacheReservations(ctx, now.Add(-3*time.Second), now.Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a live attempt on a heartbeating worker keeps it")
	n, err = st.Cache().ExtendCacheReservations(ctx, now.Add(time.Hour), now.Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "a silent worker does not")

	_, err = st.Aborts().AbortAction(ctx, key.Action("s"), "test", "")
	require.NoError(t, err)
	n, err = st.Cache().ExtendCacheReservations(ctx, now.Add(-3*time.Second), now.Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "an aborted owner whose process still runs keeps it")
	ok, err = st.Cache().ReserveCache(ctx, domain.RunKey{Project: key.Project, Domain: key.Domain, Run: "other"}.Action("s"),
		"k", now.Add(time.Hour), now)
	require.NoError(t, err)
	require.False(t, ok, "nor is it taken over")
	_, err = storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: domain.TaskKilled, Cause: domain.CauseAborted})
	require.NoError(t, err)
	n, err = st.Cache().ExtendCacheReservations(ctx, now.Add(-3*time.Second), now.Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "an ended owner with no live attempt does not")
}

// A step completed from the cache is SUCCEEDED with the entry's outputs,
// which StepOutputs returns for its declared names; a restart clears them.
func TestCompleteFromCacheOutputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	key := newRun(t, st, "r", domain.WorkflowSpec{Steps: []domain.Step{
		{Name: "s", Command: "x", Outputs: []string{"a", "b"}, Cache: &domain.CacheSpec{Version: "v1"}}}})
	storetest.StartSteps(t, st, key, "none")
	now := time.Now().UTC()
	e := store.CacheEntry{Project: "p", Domain: "d", Key: "k", RunName: "old", ActionName: "s",
		Outputs: map[string]string{"a": "1\n", "extra": "x"}}
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return tx.Cache().CompleteFromCache(ctx, key.Action("s"), domain.PhaseQueued, e, now)
	}))
	d, err := st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseSucceeded), d.Action.Phase)
	require.Equal(t, domain.CacheHit, *d.Action.CacheStatus)
	require.Equal(t, "k", *d.Action.CacheKey)
	require.NotNil(t, d.Action.StartedAt)
	require.Empty(t, d.Tasks, "a hit runs no task")
	outs, err := st.Actions().StepOutputs(ctx, key, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "1\n", "b": ""}, outs["s"])

	require.NoError(t, st.Actions().ResetSteps(ctx, key, []string{"s"}, now))
	d, err = st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	require.Nil(t, d.Action.CacheStatus)
	require.Nil(t, d.Action.Outputs)
}

// Any end of an aborted task's current attempt asks for an evaluation: the
// process is gone, so the abort can finish (its step's reservation is
// released, its ABORTED event written), even when the process won the race
// and exited by itself.
func TestKilledEndOfAbortedTaskIsEvaluated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x", Replicas: intp(2)}}}
	key := newRun(t, st, "r", spec)
	storetest.StartSteps(t, st, key)
	var ids []int64
	for _, td := range tasksOf(t, st, key, "s") {
		a, ok, err := storetest.AssignTask(ctx, st, td.Task.ID, w.ID)
		require.NoError(t, err)
		require.True(t, ok)
		_, err = storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: domain.TaskRunning})
		require.NoError(t, err)
		ids = append(ids, a.ID)
	}
	_, err := st.Aborts().AbortAction(ctx, key.Action("s"), "test", "")
	require.NoError(t, err)
	res, err := storetest.ReportAttempt(ctx, st, ids[0], store.Report{State: domain.TaskKilled, Cause: domain.CauseAborted})
	require.NoError(t, err)
	require.True(t, res.Evaluate)
	res, err = storetest.ReportAttempt(ctx, st, ids[1], store.Report{State: domain.TaskSucceeded, ExitCode: intp(0)})
	require.NoError(t, err)
	require.True(t, res.Evaluate)
}
