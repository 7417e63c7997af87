package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

// Fresh runs started together share one transaction: one lock statement,
// their expansions, one insert of their events. A started run advances in
// the same transaction; a repeated key and a missing run are advanced on
// their own, with advance's answers.
func TestStartRunsSharesOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	spec := domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		{Name: "a", Command: "true"}, {Name: "b", Command: "true", DependsOn: []string{"a"}}}}
	var fresh []domain.RunKey
	for i := range 4 {
		fresh = append(fresh, f.newRun(t, fmt.Sprintf("r%d", 3-i), spec)) // not in key order
	}
	started := f.newRun(t, "started", spec)
	_, err := f.s.advance(ctx, started)
	require.NoError(t, err)
	missing := domain.RunKey{Project: "p", Domain: "d", Run: "missing"}
	keys := append(append([]domain.RunKey{}, fresh...), started, missing, fresh[1])

	before := statementCounts(t, f.statements)
	errs := f.s.startRuns(ctx, keys)
	after := statementCounts(t, f.statements)
	for i, err := range errs {
		if keys[i] == missing {
			require.ErrorIs(t, err, asynq.SkipRetry)
			continue
		}
		require.NoError(t, err, keys[i].String())
	}
	for _, key := range append(fresh, started) {
		d, err := f.st.Runs().GetRun(ctx, key)
		require.NoError(t, err)
		require.Equal(t, string(domain.PhaseRunning), d.Run.Phase, key.Run)
		require.Len(t, f.tasks(t, key, "a"), 1, key.Run)
		require.Empty(t, f.tasks(t, key, "b"), key.Run)
		var events string
		require.NoError(t, f.db.QueryRow(`SELECT string_agg(type || ' ' || coalesce(action_name, '-'), ', ' ORDER BY id)
			FROM run_events WHERE run_name = $1`, key.Run).Scan(&events))
		require.Equal(t, "run.created a0, run.expanded a0, action.started a, action.phase a0", events, key.Run)
	}
	// The four fresh runs took three statements: their locks, their
	// expansions, and the insert of their events, which made their root
	// moves; the started run advanced in the same transaction, and the
	// missing one and the repeated key took a LockRun each.
	for op, n := range map[string]int64{"TryLockRuns": 1, "ExpandAndStartRuns": 1, "flushEvents": 1, "LockRun": 2} {
		require.Equal(t, n, after[op]-before[op], op)
	}
}

// Runs started at the same time through the gate all start, whatever
// transaction each lands in.
func TestStartGateStartsEveryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true"}}}
	var keys []domain.RunKey
	for i := range 24 {
		keys = append(keys, f.newRun(t, fmt.Sprintf("g%02d", i), spec))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i, key := range keys {
		wg.Go(func() { errs[i] = f.s.start(ctx, key) })
	}
	wg.Wait()
	for i, key := range keys {
		require.NoError(t, errs[i], key.Run)
		d, err := f.st.Runs().GetRun(ctx, key)
		require.NoError(t, err)
		require.Equal(t, string(domain.PhaseRunning), d.Run.Phase, key.Run)
		require.Len(t, f.tasks(t, key, "a"), 1, key.Run)
	}
}
