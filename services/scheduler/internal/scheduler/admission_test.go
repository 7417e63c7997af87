package scheduler

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// newKeyedRun creates run name of a one-step spec whose concurrency key is
// key (max_runs max, strategy).
func (f *runFixture) newKeyedRun(t *testing.T, name, key string, max int, strategy string) domain.RunKey {
	t.Helper()
	spec := domain.WorkflowSpec{Concurrency: &domain.Concurrency{Key: `"` + key + `"`, MaxRuns: max, Strategy: strategy},
		Steps: []domain.Step{{Name: "work", Command: "true"}}}
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	keys, errs := spec.AdmissionKeys(nil, "spec")
	require.Empty(t, errs)
	rk := domain.RunKey{Project: "p", Domain: "d", Run: name}
	_, created, err := f.st.Runs().CreateRun(context.Background(), store.NewRun{Key: rk, Spec: spec, Keys: keys})
	require.NoError(t, err)
	require.True(t, created)
	return rk
}

// admittedRun reads whether the run holds its slot, its phase and its
// pending_reason.
func (f *runFixture) admittedRun(t *testing.T, key domain.RunKey) (bool, domain.Phase, string) {
	t.Helper()
	d, err := f.st.Runs().GetRun(context.Background(), key)
	require.NoError(t, err)
	reason := ""
	if d.Run.PendingReason != nil {
		reason = *d.Run.PendingReason
	}
	return d.Run.AdmittedAt != nil, domain.Phase(d.Run.Phase), reason
}

// TestAdmissionQueue: of four runs of one key with max_runs 2 started
// together and then one by one, the first two take the slots and start,
// the others wait QUEUED with their place; once a holder ends, the next
// in line is admitted.
func TestAdmissionQueue(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t, domain.Table{0})
	ctx := context.Background()
	var keys []domain.RunKey
	for _, name := range []string{"r1", "r2", "r3", "r4"} {
		keys = append(keys, f.newKeyedRun(t, name, "prod", 2, ""))
	}
	for _, err := range f.s.startRuns(ctx, keys[:3]) {
		require.NoError(t, err)
	}
	_, p3, _ := f.admittedRun(t, keys[2])
	require.Equal(t, domain.PhaseQueued, p3, "after the batch")
	_, err := f.s.advance(ctx, keys[3])
	require.NoError(t, err)
	for i, want := range []bool{true, true, false, false} {
		admitted, phase, reason := f.admittedRun(t, keys[i])
		require.Equal(t, want, admitted, "run %d", i+1)
		if want {
			require.NotEqual(t, domain.PhaseQueued, phase, "an admitted run starts")
			continue
		}
		require.Equal(t, domain.PhaseQueued, phase, "a waiting run stays QUEUED")
		require.Equal(t, domain.WaitReason("prod", i-1, 2), reason)
	}
	ledger, err := f.st.Runs().ConcurrencyLedger(ctx, "p", "d")
	require.NoError(t, err)
	require.Len(t, ledger, 1)
	require.Equal(t, 2, ledger[0].MaxRuns)
	require.Len(t, ledger[0].Holders, 2)
	require.Equal(t, 2, ledger[0].Waiting)
	require.Equal(t, "r3", ledger[0].Waiters[0].Run)
	require.Equal(t, 1, ledger[0].Waiters[0].Place)

	heads, err := f.st.Runs().LineHeads(ctx, 100)
	require.NoError(t, err)
	require.Empty(t, heads, "no slot is free")

	// An aborted holder keeps its slot until its abort is delivered.
	root := keys[0].Action(domain.RootActionName)
	_, err = f.st.Aborts().AbortAction(ctx, root, "stop", store.CauseAborted)
	require.NoError(t, err)
	_, err = f.s.advance(ctx, keys[2])
	require.NoError(t, err)
	admitted, _, _ := f.admittedRun(t, keys[2])
	require.False(t, admitted, "r1's processes may still run")
	ledger, err = f.st.Runs().ConcurrencyLedger(ctx, "p", "d")
	require.NoError(t, err)
	for _, h := range ledger[0].Holders {
		require.Equal(t, h.Run == "r1", h.Stopping, "r1 holds its slot while it stops; r2 runs")
	}

	require.NoError(t, f.st.Aborts().ClearAbortRequest(ctx, root, store.AbortDelivered))
	heads, err = f.st.Runs().LineHeads(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{keys[2]}, heads, "one slot is free: the first in line")
	_, err = f.s.advance(ctx, keys[2])
	require.NoError(t, err)
	admitted, phase, reason := f.admittedRun(t, keys[2])
	require.True(t, admitted)
	require.Equal(t, domain.PhaseRunning, phase)
	require.Empty(t, reason)
	_, _, reason = f.admittedRun(t, keys[3])
	require.Equal(t, domain.WaitReason("prod", 2, 2), reason, "its place as last decided")
	place, err := f.st.Runs().LinePlace(ctx, runRow(t, f, keys[3]))
	require.NoError(t, err)
	require.Equal(t, 1, place, "its place now")
}

// TestAdmissionCancelStrategies: cancel_newest ends a run over the limit
// at once; cancel_in_progress admits the newest run once the oldest,
// cancelled, has stopped, and ends a run that max_runs newer runs
// supersede.
func TestAdmissionCancelStrategies(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t, domain.Table{0})
	ctx := context.Background()
	n1, n2 := f.newKeyedRun(t, "n1", "a", 1, domain.StrategyCancelNewest), f.newKeyedRun(t, "n2", "a", 1, domain.StrategyCancelNewest)
	for _, err := range f.s.startRuns(ctx, []domain.RunKey{n1, n2}) {
		require.NoError(t, err)
	}
	admitted, _, _ := f.admittedRun(t, n1)
	require.True(t, admitted)
	admitted, phase, _ := f.admittedRun(t, n2)
	require.False(t, admitted)
	require.Equal(t, domain.PhaseAborted, phase, "over the limit: ended at once")
	a, err := f.st.Actions().GetAction(ctx, n2.Action(domain.RootActionName))
	require.NoError(t, err)
	require.Equal(t, domain.AbortReasonConcurrency, *a.Action.AbortReason)

	c1 := f.newKeyedRun(t, "c1", "b", 1, domain.StrategyCancelInProgress)
	_, err = f.s.advance(ctx, c1)
	require.NoError(t, err)
	c2, c3 := f.newKeyedRun(t, "c2", "b", 1, domain.StrategyCancelInProgress), f.newKeyedRun(t, "c3", "b", 1, domain.StrategyCancelInProgress)
	_, err = f.s.advance(ctx, c2)
	require.NoError(t, err)
	_, phase, _ = f.admittedRun(t, c2)
	require.Equal(t, domain.PhaseAborted, phase, "c3 is newer: c2 is superseded")
	_, phase, _ = f.admittedRun(t, c1)
	require.Equal(t, domain.PhaseAborted, phase, "the run in progress is cancelled")
	a, err = f.st.Actions().GetAction(ctx, c1.Action(domain.RootActionName))
	require.NoError(t, err)
	require.Equal(t, domain.AbortReasonConcurrency, *a.Action.AbortReason)
	_, err = f.s.advance(ctx, c3)
	require.NoError(t, err)
	admitted, phase, _ = f.admittedRun(t, c3)
	require.False(t, admitted, "c1 has not stopped")
	require.Equal(t, domain.PhaseQueued, phase)
	require.NoError(t, f.st.Aborts().ClearAbortRequest(ctx, c1.Action(domain.RootActionName), store.AbortDelivered))
	_, err = f.s.advance(ctx, c3)
	require.NoError(t, err)
	admitted, _, _ = f.admittedRun(t, c3)
	require.True(t, admitted)
}

// runRow reads a run's row.
func runRow(t *testing.T, f *runFixture, key domain.RunKey) store.Run {
	t.Helper()
	d, err := f.st.Runs().GetRun(context.Background(), key)
	require.NoError(t, err)
	return d.Run
}

// TestAdmissionRestart: a restart of a run with a concurrency key gives up
// its slot and is admitted again as a new run is: it waits while another
// run holds the key.
func TestAdmissionRestart(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t, domain.Table{0})
	ctx := context.Background()
	stop := func(key domain.RunKey) {
		t.Helper()
		root := key.Action(domain.RootActionName)
		_, err := f.st.Aborts().AbortAction(ctx, root, "stop", store.CauseAborted)
		require.NoError(t, err)
		require.NoError(t, f.st.Aborts().ClearAbortRequest(ctx, root, store.AbortDelivered))
	}
	r1 := f.newKeyedRun(t, "r1", "k", 1, "")
	_, err := f.s.advance(ctx, r1)
	require.NoError(t, err)
	stop(r1)
	r2 := f.newKeyedRun(t, "r2", "k", 1, "")
	_, err = f.s.advance(ctx, r2)
	require.NoError(t, err)
	admitted, _, _ := f.admittedRun(t, r2)
	require.True(t, admitted, "r1 ended: its slot is free")

	_, err = f.st.Runs().RequestRestart(ctx, r1, "")
	require.NoError(t, err)
	_, err = f.s.advance(ctx, r1)
	require.NoError(t, err)
	admitted, phase, reason := f.admittedRun(t, r1)
	require.False(t, admitted)
	require.Equal(t, domain.PhaseAborted, phase, "the restart waits, not applied")
	require.Equal(t, domain.WaitReason("k", 1, 1), reason)

	stop(r2)
	_, err = f.s.advance(ctx, r1)
	require.NoError(t, err)
	admitted, phase, _ = f.admittedRun(t, r1)
	require.True(t, admitted)
	require.Equal(t, domain.PhaseRunning, phase, "restarted once the slot is free")
}

// TestLineHeadsTakeTurns: the sweep starts as many of each line as it has
// free slots, the first of every key before the second of any.
func TestLineHeadsTakeTurns(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t, domain.Table{0})
	a1, a2 := f.newKeyedRun(t, "a1", "a", 2, ""), f.newKeyedRun(t, "a2", "a", 2, "")
	f.newKeyedRun(t, "a3", "a", 2, "")
	b1, b2 := f.newKeyedRun(t, "b1", "b", 2, ""), f.newKeyedRun(t, "b2", "b", 2, "")
	heads, err := f.st.Runs().LineHeads(context.Background(), 100)
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{a1, b1, a2, b2}, heads)
}
