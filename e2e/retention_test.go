package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// retentionEnv runs the reaper every 100 ms.
var retentionEnv = []string{"CAPSTAN_RETENTION_INTERVAL=100ms"}

// TestRetentionTTL: runs with ttl after_success 2s and after_failure 1h
// are stamped to expire accordingly; the succeeded ones disappear (404,
// their archive readable), the failed ones stay. A run without a ttl of
// its own follows its project's settings.
func TestRetentionTTL(t *testing.T) {
	s := Start(t, bins, Options{Env: append([]string{"CAPSTAN_ARCHIVE_URL=file://" + t.TempDir()}, retentionEnv...)})
	ctx := context.Background()
	ttl := &api.TTL{AfterSuccess: ptr("2s"), AfterFailure: ptr("1h")}
	spec := func(command string, ttl *api.TTL) api.WorkflowSpec {
		return api.WorkflowSpec{Steps: []api.Step{{Name: "s", Command: ptr(command)}}, Ttl: ttl}
	}
	set, err := s.Client.SetProjectSettingsWithResponse(ctx, project,
		api.ProjectSettings{Retention: &api.TTL{AfterCompletion: ptr("2s")}})
	require.NoError(t, err)
	require.NotNil(t, set.JSON200, "%d %s", set.StatusCode(), set.Body)

	var ok, failed []string
	for range 3 {
		ok = append(ok, create(t, s, spec("echo ok", ttl)))
		failed = append(failed, create(t, s, spec("exit 1", ttl)))
	}
	byProject := create(t, s, spec("echo ok", nil))
	for _, name := range append(append([]string{}, ok...), byProject) {
		run := waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
		require.NotNil(t, run.ExpiresAt, name)
		require.Equal(t, 2*time.Second, run.ExpiresAt.Sub(*run.EndedAt), name)
	}
	for _, name := range failed {
		run := waitPhase(t, s, name, 60*time.Second, api.PhaseFAILED)
		require.NotNil(t, run.ExpiresAt, name)
		require.Equal(t, time.Hour, run.ExpiresAt.Sub(*run.EndedAt), name)
	}
	gone := func(name string) bool {
		resp, err := s.Client.GetRunWithResponse(ctx, project, domain, name)
		require.NoError(t, err)
		return resp.StatusCode() == http.StatusNotFound
	}
	for _, name := range append(append([]string{}, ok...), byProject) {
		s.Eventually(30*time.Second, "succeeded run "+name+" deleted", func() bool { return gone(name) })
		arch, err := s.Client.GetArchivedRunWithResponse(ctx, project, domain, name)
		require.NoError(t, err)
		require.NotNil(t, arch.JSON200, "archived %s: %d %s", name, arch.StatusCode(), arch.Body)
		require.Equal(t, api.PhaseSUCCEEDED, arch.JSON200.Phase)
	}
	for _, name := range failed {
		require.Equal(t, api.PhaseFAILED, getRun(t, s, name).Phase, "a failed run is kept for its hour")
	}
}

// TestReaperKilledMidBatch: the scheduler is killed (kill -9) while the
// reaper deletes 600 expired runs ten a transaction; every run is then either
// whole (each of its rows in every table still there) or gone (none left),
// and the restarted scheduler deletes the rest.
func TestReaperKilledMidBatch(t *testing.T) {
	s := Start(t, bins, Options{Env: append([]string{"CAPSTAN_RETENTION_BATCH=10"}, retentionEnv...)})
	ctx := context.Background()
	db := openDB(t, s)
	const n = 600
	names := make([]string, n)
	items := make([]map[string]any, n)
	for i := range names {
		names[i] = fmt.Sprintf("reap-%03d", i)
		items[i] = map[string]any{"name": names[i], "spec": map[string]any{
			"steps": []map[string]any{{"name": "s", "plugin": "noop", "replicas": 2}}, "ttl": map[string]any{"after_success": "1h"}}}
	}
	for i := 0; i < n; i += 200 {
		resp, err := s.Client.CreateRunsWithResponse(ctx, project, domain, api.CreateRunsRequest{Runs: items[i : i+200]})
		require.NoError(t, err)
		require.Less(t, resp.StatusCode(), 300, "%s", resp.Body)
	}
	// rows counts each run's rows in every table a run owns; a run gone
	// has none (absent).
	rows := func() map[string]string {
		out := map[string]string{}
		r, err := db.Query(`WITH n AS (SELECT unnest($1::text[]) AS name)
			SELECT n.name, (SELECT count(*) FROM runs WHERE name = n.name) || '/' ||
			  (SELECT count(*) FROM actions WHERE run_name = n.name) || '/' ||
			  (SELECT count(*) FROM tasks WHERE run_name = n.name) || '/' ||
			  (SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.run_name = n.name) || '/' ||
			  (SELECT count(*) FROM run_events WHERE run_name = n.name) FROM n`, names)
		require.NoError(t, err)
		defer r.Close()
		for r.Next() {
			var name, counts string
			require.NoError(t, r.Scan(&name, &counts))
			if counts != "0/0/0/0/0" {
				out[name] = counts
			}
		}
		require.NoError(t, r.Err())
		return out
	}
	var whole map[string]string
	s.Eventually(2*time.Minute, "every run ended", func() bool {
		var live int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM runs WHERE name = ANY($1) AND ended_at IS NULL`, names).Scan(&live))
		if live > 0 {
			return false
		}
		whole = rows()
		return true
	})
	require.Len(t, whole, n)
	// An hour passes: every run expires at once.
	_, err := db.Exec(`UPDATE runs SET expires_at = now() WHERE name = ANY($1)`, names)
	require.NoError(t, err)
	s.Eventually(time.Minute, "the reaper under way", func() bool {
		var left int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM runs WHERE name = ANY($1)`, names).Scan(&left))
		return left < len(whole)
	})
	s.Kill("scheduler")
	after := rows()
	require.NotEmpty(t, after, "the kill came before the reaper was done")
	for name, counts := range after {
		require.Equal(t, whole[name], counts, "run %s is whole or gone", name)
	}
	t.Logf("scheduler killed with %d of %d runs left", len(after), len(whole))

	s.StartService("scheduler")
	s.Eventually(time.Minute, "the restarted scheduler deletes the rest", func() bool { return len(rows()) == 0 })
	var orphans int
	require.NoError(t, db.QueryRow(`SELECT (SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = a.task_id))
		+ (SELECT count(*) FROM tasks t WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.name = t.run_name))
		+ (SELECT count(*) FROM actions x WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.name = x.run_name))`).Scan(&orphans))
	require.Zero(t, orphans, "no row outlives its run")
}
