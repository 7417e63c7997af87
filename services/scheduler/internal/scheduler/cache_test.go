package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// cachedSpec is a run of a discoverable step "s" with an output, and a step
// "t" that reads it.
func cachedSpec(serializable bool) domain.WorkflowSpec {
	return domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		{Name: "s", Command: "echo 1 > $CAPSTAN_OUTPUTS_DIR/n", Outputs: []string{"n"},
			Cache: &domain.CacheSpec{Version: "v1", Serializable: serializable, MaxAge: "1h"}},
		{Name: "t", Command: "true", Inputs: []domain.Input{{From: "s.n", As: "N"}}},
	}}
}

// startRun creates and advances a run.
func (f *runFixture) startRun(t *testing.T, name string, spec domain.WorkflowSpec) domain.RunKey {
	t.Helper()
	key := f.newRun(t, name, spec)
	_, err := f.s.advance(context.Background(), key)
	require.NoError(t, err)
	return key
}

// finishStep runs the current attempt of step's task 0 to the report final on
// worker w (assigning it first unless it is assigned) and evaluates it.
func (f *runFixture) finishStep(t *testing.T, w store.Worker, key domain.RunKey, step string, final store.Report) Evaluation {
	t.Helper()
	ctx := context.Background()
	a := f.attemptIn(t, w, f.currentTask(t, key, step), reportRunning, final)
	ev, err := f.s.evaluate(ctx, a.ID)
	require.NoError(t, err)
	return ev
}

// A cached step runs once: its success writes the entry (POPULATED); the
// next run's step SUCCEEDS at once from it (HIT) with the same outputs, runs
// no task, and its dependent starts in the same advance with them.
func TestCacheHitRunsNoTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	first := f.startRun(t, "first", cachedSpec(false))
	s := f.action(t, first, "s")
	require.Equal(t, domain.CacheMiss, *s.CacheStatus)
	f.finishStep(t, w, first, "s", store.Report{State: domain.TaskSucceeded, ExitCode: iptr(0),
		Outputs: map[string]string{"n": "1\n"}})
	s = f.action(t, first, "s")
	require.Equal(t, string(domain.PhaseSucceeded), s.Phase)
	require.Equal(t, domain.CachePopulated, *s.CacheStatus)
	e, err := f.st.Cache().GetCacheEntry(ctx, "p", "d", *s.CacheKey)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"n": "1\n"}, e.Outputs)
	require.NotNil(t, e.ExpiresAt, "max_age 1h")

	second := f.startRun(t, "second", cachedSpec(false))
	hit := f.action(t, second, "s")
	require.Equal(t, string(domain.PhaseSucceeded), hit.Phase)
	require.Equal(t, domain.CacheHit, *hit.CacheStatus)
	require.Equal(t, *s.CacheKey, *hit.CacheKey)
	require.Empty(t, f.tasks(t, second, "s"), "a hit runs no task")
	require.Len(t, f.tasks(t, second, "t"), 1, "its dependent started in the same advance")
	outs, err := f.st.Actions().StepOutputs(ctx, second, []string{"s"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"n": "1\n"}, outs["s"])

	require.NoError(t, f.st.Cache().DeleteCacheEntry(ctx, "p", "d", *s.CacheKey))
	third := f.startRun(t, "third", cachedSpec(false))
	require.Equal(t, domain.CacheMiss, *f.action(t, third, "s").CacheStatus, "evicted: it runs again")
	require.Len(t, f.tasks(t, third, "s"), 1)
}

// A serializable step whose key another run's step reserved waits
// WAITING_FOR_CACHE with a backoff; the owner's success releases the key
// (cache_released) and names the waiter, whose next advance is a HIT.
func TestSerializableCacheWaiterHitsAfterOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	owner := f.startRun(t, "owner", cachedSpec(true))
	waiter := f.startRun(t, "waiter", cachedSpec(true))
	wa := f.action(t, waiter, "s")
	require.Equal(t, string(domain.PhaseWaitingForCache), wa.Phase)
	require.Equal(t, store.WaitCache, *wa.WaitingFor)
	require.NotNil(t, wa.NotBefore)
	require.Equal(t, 1, wa.CacheWaits)
	require.Empty(t, f.tasks(t, waiter, "s"))
	_, err := f.s.advance(ctx, waiter)
	require.NoError(t, err)
	require.Equal(t, 2, f.action(t, waiter, "s").CacheWaits, "each check counts toward the backoff")

	ev := f.finishStep(t, w, owner, "s", store.Report{State: domain.TaskSucceeded, ExitCode: iptr(0),
		Outputs: map[string]string{"n": "1\n"}})
	require.Equal(t, []domain.RunKey{waiter}, ev.Waiters)
	require.Equal(t, 1, f.events(t, "cache_released", 0))
	_, err = f.s.advance(ctx, waiter)
	require.NoError(t, err)
	wa = f.action(t, waiter, "s")
	require.Equal(t, string(domain.PhaseSucceeded), wa.Phase)
	require.Equal(t, domain.CacheHit, *wa.CacheStatus)
	require.Nil(t, wa.WaitingFor)
}

// When the owner is aborted, the evaluation of its killed attempt releases
// the key and the waiter takes the reservation and runs; when the owner
// fails, the same.
func TestSerializableCacheWaiterRunsAfterOwnerEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	owner := f.startRun(t, "owner", cachedSpec(true))
	waiter := f.startRun(t, "waiter", cachedSpec(true))
	a := f.attemptIn(t, w, f.currentTask(t, owner, "s"), reportRunning)
	_, err := f.st.Aborts().AbortAction(ctx, owner.Action("s"), "test", "")
	require.NoError(t, err)
	_, err = storetest.ReportAttempt(ctx, f.st, a.ID, reportKilledAbort)
	require.NoError(t, err)
	ev, err := f.s.evaluate(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{waiter}, ev.Waiters)
	var why string
	require.NoError(t, f.db.QueryRow(`SELECT data->>'why' FROM run_events WHERE type = 'cache_released'
		AND run_name = 'owner'`).Scan(&why))
	require.Equal(t, "aborted", why)

	_, err = f.s.advance(ctx, waiter)
	require.NoError(t, err)
	wa := f.action(t, waiter, "s")
	require.Equal(t, domain.CacheMiss, *wa.CacheStatus)
	require.Equal(t, string(domain.PhaseQueued), wa.Phase)
	require.Len(t, f.tasks(t, waiter, "s"), 1, "the waiter runs it")

	third := f.startRun(t, "third", cachedSpec(true))
	require.Equal(t, string(domain.PhaseWaitingForCache), f.action(t, third, "s").Phase, "the waiter owns it now")
	ev = f.finishStep(t, w, waiter, "s", reportUserFail)
	require.Equal(t, domain.PhaseFailed, ev.ActionPhase)
	require.Equal(t, []domain.RunKey{third}, ev.Waiters, "a failed owner releases it too")
	_, err = f.s.advance(ctx, third)
	require.NoError(t, err)
	require.Len(t, f.tasks(t, third, "s"), 1)
}

// A reservation whose owner stopped being extended (its executor died)
// expires and the next check takes it over.
func TestSerializableCacheExpiredReservationTakenOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	owner := f.startRun(t, "owner", cachedSpec(true))
	require.Len(t, f.tasks(t, owner, "s"), 1)
	waiter := f.startRun(t, "waiter", cachedSpec(true))
	require.Equal(t, string(domain.PhaseWaitingForCache), f.action(t, waiter, "s").Phase)
	_, err := f.db.Exec(`UPDATE cache_reservations SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	_, err = f.s.advance(ctx, waiter)
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseQueued), f.action(t, waiter, "s").Phase)
	require.Len(t, f.tasks(t, waiter, "s"), 1)
}

// A waiter of a suspended run does not wake its run on every pass: a due
// check moves to the wait backoff's cap; the run's resume checks it again.
func TestCacheWaitOfSuspendedRunHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	f.startRun(t, "owner", cachedSpec(true))
	waiter := f.startRun(t, "waiter", cachedSpec(true))
	_, _, err := f.st.Runs().RequestSuspend(ctx, waiter)
	require.NoError(t, err)
	_, err = f.db.Exec(`UPDATE actions SET not_before = now() - interval '1 second' WHERE run_name = 'waiter' AND name = 's'`)
	require.NoError(t, err)
	_, err = f.s.advance(ctx, waiter)
	require.NoError(t, err)
	wa := f.action(t, waiter, "s")
	require.Equal(t, string(domain.PhaseWaitingForCache), wa.Phase)
	require.True(t, wa.NotBefore.After(time.Now().Add(30*time.Second)), "next check at the cap: %s", wa.NotBefore)
	due, err := f.st.Tasks().ExpiryDue(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, due.Waits)
}

// An owner that ends UNSCHEDULABLE at its scheduling deadline releases the
// key in that transaction and names the waiter.
func TestCacheOwnerUnschedulableReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	spec := cachedSpec(true)
	spec.Steps[0].SchedulingTimeout = "1ms" // not part of the key
	owner := f.startRun(t, "owner", spec)
	waiter := f.startRun(t, "waiter", cachedSpec(true))
	require.Equal(t, string(domain.PhaseWaitingForCache), f.action(t, waiter, "s").Phase)
	require.Eventually(t, func() bool {
		res, err := (expiry{f.s}).runOnce(ctx)
		require.NoError(t, err)
		return res.Unschedulable == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, string(domain.PhaseUnschedulable), f.action(t, owner, "s").Phase)
	require.Equal(t, 1, f.events(t, "cache_released", 0))
	_, err := f.s.advance(ctx, waiter)
	require.NoError(t, err)
	require.Len(t, f.tasks(t, waiter, "s"), 1, "the waiter runs it")
}
