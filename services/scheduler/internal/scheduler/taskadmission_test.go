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

// Step concurrency (Airflow's pools): at most max_tasks tasks of a key,
// across runs, are ASSIGNED, BUILDING or RUNNING; the others wait PENDING
// with the key named, and one is placed when a holder ends.
func TestPlacementHonoursStepConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	f.registerWith(t, 8, nil)
	spec := domain.WorkflowSpec{Params: []domain.Param{{Name: "env", Type: "string"}},
		Steps: []domain.Step{{Name: "migrate", Command: "true", Replicas: iptr(2),
			Concurrency: &domain.StepConcurrency{Key: `"db-" + params.env`, MaxTasks: 1}}}}
	var keys []domain.RunKey
	for _, name := range []string{"a", "b"} {
		key := domain.RunKey{Project: "p", Domain: "d", Run: name}
		_, _, err := f.st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec, Params: map[string]any{"env": "prod"}})
		require.NoError(t, err)
		_, err = f.s.advance(ctx, key)
		require.NoError(t, err)
		keys = append(keys, key)
	}
	res, err := f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Placed, "one slot of db-prod across both runs")
	require.Equal(t, 3, res.Waiting)
	var holder int64
	for _, k := range keys {
		for _, td := range f.tasks(t, k, "migrate") {
			require.Equal(t, "db-prod", *td.Task.ConcurrencyKey, "the key evaluated over the run's params")
			if td.Task.State == domain.TaskAssigned {
				holder = td.Attempts[0].ID
				continue
			}
			require.Equal(t, `concurrency key "db-prod": 1 of 1 running`, *td.Task.PendingReason)
		}
	}
	slots, err := f.st.Placement().TaskSlots(ctx, "p", "d")
	require.NoError(t, err)
	require.Len(t, slots, 1)
	require.Equal(t, 3, slots[0].Waiting)
	require.Len(t, slots[0].Holders, 1)

	res, err = f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Placed, "the slot is still held")

	for _, rep := range []store.Report{reportRunning, reportSucceeded} {
		_, err := storetest.ReportAttempt(ctx, f.st, holder, rep)
		require.NoError(t, err)
	}
	_, err = f.s.evaluate(ctx, holder)
	require.NoError(t, err)
	res, err = f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Placed, "the freed slot goes to the next task")
}

// Rate limits (Hatchet's): a task is placed only when its bucket holds its
// units; the tokens are taken with the bind, and the pass says when the
// next token is due.
func TestPlacementHonoursRateLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	f.registerWith(t, 8, nil)
	_, _, err := f.st.RateLimits().PutRateLimit(ctx, "p", "paid-api", domain.TokenRate{Limit: 2, Per: time.Hour})
	require.NoError(t, err)
	key := f.newRun(t, "r", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: iptr(5),
		RateLimits: []domain.RateLimitUse{{Name: "paid-api"}}}}})
	_, err = f.s.advance(ctx, key)
	require.NoError(t, err)

	before := time.Now()
	res, err := f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Placed, "a new bucket is full: its limit at once")
	require.Equal(t, 3, res.Waiting)
	require.WithinDuration(t, before.Add(30*time.Minute), res.TokensDueAt, time.Minute,
		"the next token of 2/h is due in half an hour")
	for _, td := range f.tasks(t, key, "s") {
		if td.Task.State == domain.TaskPending {
			require.Equal(t, `rate limit "paid-api": waiting for 1 token`, *td.Task.PendingReason)
		}
	}
	res, err = f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Placed, "the bucket's tokens were taken and stored with the bind")

	// A higher limit does not refill the bucket at once: its tokens refill
	// at the new rate from when they were taken.
	_, _, err = f.st.RateLimits().PutRateLimit(ctx, "p", "paid-api", domain.TokenRate{Limit: 1000, Per: time.Second})
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	placed := 0
	for placed < 3 && time.Now().Before(deadline) {
		res, err = f.s.runOnce(ctx)
		require.NoError(t, err)
		placed += res.Placed
	}
	require.Equal(t, 3, placed, "the refilled bucket admits the rest")
}

// A pass whose tasks have no admission fields reads no admission state
// and writes no tokens: no statement more than before.
func TestPlacementWithoutAdmissionCostsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	f.registerWith(t, 8, nil)
	key := f.newRun(t, "r", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: iptr(3)}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	before := statementCounts(t, f.statements)
	res, err := f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, res.Placed)
	after := statementCounts(t, f.statements)
	require.Equal(t, before["AdmissionState"], after["AdmissionState"])
	require.Equal(t, before["TakeTokens"], after["TakeTokens"])
}
