package e2e

import (
	"context"
	"database/sql"
	"net/http"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// putRateLimit creates or replaces a rate limit of the e2e project.
func putRateLimit(tb testing.TB, c *api.ClientWithResponses, name string, limit int, per string) {
	tb.Helper()
	resp, err := c.PutRateLimitWithResponse(context.Background(), project, name, api.RateLimitRequest{Limit: &limit, Per: &per})
	if err != nil || (resp.StatusCode() != http.StatusCreated && resp.StatusCode() != http.StatusOK) {
		tb.Fatalf("put rate limit %s: %v %s", name, err, resp.Body)
	}
}

// startsPerSecond counts the attempts created (created_at: the placement
// that took their tasks' tokens, on the placer's clock) in each 1 s window
// from the first, the first window included, up to the last full window.
func startsPerSecond(ctx context.Context, db *sql.DB) ([]int, error) {
	rows, err := db.QueryContext(ctx, `WITH s AS (SELECT created_at AS at FROM attempts),
			f AS (SELECT min(at) AS t0, max(at) AS t1 FROM s)
		SELECT floor(extract(epoch FROM s.at - f.t0))::int AS w, count(*) FROM s, f
		WHERE s.at < f.t0 + floor(extract(epoch FROM f.t1 - f.t0)) * interval '1 second'
		GROUP BY w ORDER BY w`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var w, n int
		if err := rows.Scan(&w, &n); err != nil {
			return nil, err
		}
		for len(out) < w {
			out = append(out, 0)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// TestRateLimitPacesTasks: a step taking a rate limit of 20/s places its
// 300 tasks at that rate (Hatchet's token bucket): by the end of each 1 s
// window j from the first placement, at most the full bucket's burst (20)
// and 20 per second since, 20 + 20(j+1), were placed (one more for the
// rounding of a refill), however the placement passes fall; and the mean
// rate after the first window is near the limit.
func TestRateLimitPacesTasks(t *testing.T) {
	s := Start(t, bins, Options{Env: []string{"CAPSTAN_EXECUTOR_SLOTS=40"}})
	ctx := context.Background()
	putRateLimit(t, s.Client, "paid-api", 20, "1s")
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "call", Plugin: ptr("noop"), Replicas: ptr(300),
		RateLimits: &[]api.RateLimitUse{{Name: "paid-api"}}}}})
	db := openDB(t, s)
	s.Eventually(10*time.Second, "a task waiting for a token", func() bool {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM tasks
			WHERE pending_reason = 'rate limit "paid-api": waiting for 1 token'`).Scan(&n))
		return n > 0
	})
	waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)

	windows, err := startsPerSecond(ctx, db)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(windows), 12, "300 tasks at 20/s take about 14 s: %v", windows)
	placed := 0
	for j, n := range windows {
		placed += n
		require.LessOrEqual(t, placed, 20+20*(j+1)+1, "placed by the end of window %d of %v", j, windows)
	}
	rate := float64(placed-windows[0]) / float64(len(windows)-1)
	require.InDelta(t, 20, rate, 2, "the mean rate after the first window: %v", windows)
	t.Logf("starts per second: %v (mean %.1f after the first)", windows, rate)
}

// TestStepConcurrencyOneAtATime: several runs whose step has concurrency
// {key: "db-migrate", max_tasks: 1} never have more than one such task
// ASSIGNED, BUILDING or RUNNING at a time, sampled as they run and read
// from the attempts afterwards, and all succeed.
func TestStepConcurrencyOneAtATime(t *testing.T) {
	s := Start(t, bins, Options{})
	ctx := context.Background()
	spec := api.WorkflowSpec{Steps: []api.Step{{Name: "migrate", Command: ptr("sleep 0.2"), Replicas: ptr(2),
		Concurrency: &api.StepConcurrency{Key: `"db-migrate"`, MaxTasks: 1}}}}
	var names []string
	for range 4 {
		names = append(names, create(t, s, spec))
	}
	db := openDB(t, s)
	s.Eventually(30*time.Second, "the ledger shows the key held and waited for", func() bool {
		for _, k := range ledger(t, s) {
			if k.Kind == api.ConcurrencyKeyKindTask && k.Key == "db-migrate" && k.Max == 1 && k.Waiting > 0 {
				require.LessOrEqual(t, len(k.Holders), 1)
				return len(k.Holders) == 1 && k.Holders[0].Action != nil && *k.Holders[0].Action == "migrate"
			}
		}
		return false
	})
	most, sawWaiting := 0, false
	s.Eventually(60*time.Second, "every migrate task ended", func() bool {
		var live, pending, waiting int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE state IN (2, 3, 9)),
				count(*) FILTER (WHERE state = 1),
				count(*) FILTER (WHERE pending_reason = 'concurrency key "db-migrate": 1 of 1 running')
			FROM tasks WHERE concurrency_key = 'db-migrate'`).Scan(&live, &pending, &waiting))
		most, sawWaiting = max(most, live), sawWaiting || waiting > 0
		return live == 0 && pending == 0
	})
	require.LessOrEqual(t, most, 1, "at most one db-migrate task holds the slot")
	require.Empty(t, ledger(t, s), "no key is held or waited for at the end")
	require.True(t, sawWaiting, "the others waited with the key named")
	for _, n := range names {
		waitPhase(t, s, n, 10*time.Second, api.PhaseSUCCEEDED)
	}
	// From the rows: each attempt was bound only after the one before it
	// had finished.
	rows, err := db.QueryContext(ctx, `SELECT a.created_at, a.finished_at FROM attempts a
		JOIN tasks t ON t.id = a.task_id WHERE t.concurrency_key = 'db-migrate' ORDER BY a.created_at`)
	require.NoError(t, err)
	defer rows.Close()
	var prevEnd time.Time
	count := 0
	for rows.Next() {
		var created time.Time
		var finished sql.NullTime
		require.NoError(t, rows.Scan(&created, &finished))
		require.True(t, finished.Valid)
		require.False(t, created.Before(prevEnd), "attempt %d bound at %s before the previous finished at %s",
			count, created, prevEnd)
		prevEnd = finished.Time
		count++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 8, count)
}
