package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// Project fair-a floods 1,200 PENDING tasks (more than a pass reads, 500,
// and far more than the executors' 8 slots), then project fair-b submits 3
// runs whose spec has a fairness_key: b's first task starts within a few
// passes, while a still has most of its backlog waiting; b's tasks carry
// their run's fairness key.
func TestFairShareAcrossProjects(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Env: []string{"CAPSTAN_EXECUTOR_SLOTS=4"}})
	db := openDB(t, s)
	ctx := context.Background()
	flood := api.WorkflowSpec{Steps: []api.Step{{Name: "work", Command: ptr("sleep 0.2"), Replicas: ptr(600)}}}
	for _, name := range []string{"flood-1", "flood-2"} {
		resp, err := s.Client.CreateRunWithResponse(ctx, "fair-a", domain, nil, api.CreateRunRequest{Name: ptr(name), Spec: &flood})
		require.NoError(t, err)
		require.NotNil(t, resp.JSON201, "create: %d %s", resp.StatusCode(), resp.Body)
	}
	aPending := func() int {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM tasks WHERE project = 'fair-a' AND state = 1`).Scan(&n))
		return n
	}
	s.Eventually(60*time.Second, "a's tasks running, its backlog pending", func() bool {
		var live int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM tasks WHERE project = 'fair-a' AND state IN (2, 3, 9)`).Scan(&live))
		return live >= 4 && aPending() > 1000
	})

	few := api.WorkflowSpec{Params: &[]api.Param{{Name: "team", Default: "blue"}}, FairnessKey: ptr("params.team"),
		Steps: []api.Step{{Name: "quick", Command: ptr("true")}}}
	submitted := time.Now()
	for _, name := range []string{"few-1", "few-2", "few-3"} {
		resp, err := s.Client.CreateRunWithResponse(ctx, "fair-b", domain, nil, api.CreateRunRequest{Name: ptr(name), Spec: &few})
		require.NoError(t, err)
		require.NotNil(t, resp.JSON201, "create: %d %s", resp.StatusCode(), resp.Body)
	}
	var started time.Duration
	s.Eventually(15*time.Second, "b's first task started", func() bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM tasks WHERE project = 'fair-b' AND state <> 1`).Scan(&n))
		started = time.Since(submitted)
		return n > 0
	})
	left := aPending()
	t.Logf("b's first task started %s after its submission; a had %d tasks pending", started, left)
	require.Greater(t, left, 900, "b started long before a's backlog drained")

	var keys []string
	rows, err := db.Query(`SELECT DISTINCT fairness_key FROM tasks WHERE project = 'fair-b'`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"blue"}, keys, "b's tasks carry their runs' fairness key")
	s.Eventually(30*time.Second, "b's runs done", func() bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM runs WHERE project = 'fair-b' AND phase = 'SUCCEEDED'`).Scan(&n))
		return n == 3
	})
	require.Greater(t, aPending(), 500, "b's runs all ended while a still waited")
}
