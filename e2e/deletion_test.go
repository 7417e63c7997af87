package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// TestDeleteRun deletes runs over the API: a live run and a child run of a
// live parent are refused with 409 not_terminal and stay whole; an ended
// parent goes with its child and every row of theirs (404 after, no row
// left in any table); an unknown run is 404.
func TestDeleteRun(t *testing.T) {
	s := Start(t, bins, Options{})
	ctx := context.Background()
	db := openDB(t, s)
	del := func(name string) *api.DeleteRunResponse {
		resp, err := s.Client.DeleteRunWithResponse(ctx, project, domain, name)
		require.NoError(t, err)
		return resp
	}
	// rows counts the runs' rows: those of runs, actions, tasks and
	// attempts (with attempts whose task is gone), and their events.
	rows := func(names ...string) (owned, events int) {
		require.NoError(t, db.QueryRow(`SELECT (SELECT count(*) FROM runs WHERE name = ANY($1))
			+ (SELECT count(*) FROM actions WHERE run_name = ANY($1)) + (SELECT count(*) FROM tasks WHERE run_name = ANY($1))
			+ (SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.run_name = ANY($1))
			+ (SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = a.task_id)),
			(SELECT count(*) FROM run_events WHERE run_name = ANY($1))`, names).Scan(&owned, &events))
		return owned, events
	}

	pushTemplate(t, s, "gated", api.WorkflowSpec{Steps: []api.Step{
		{Name: "wait", Command: ptr(`while [ ! -e "$CAPSTAN_RUN_DIR/open" ]; do sleep 0.05; done`)}}})
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{workflowStep("child", "gated")}})
	kid := name + "-child-0"
	s.Eventually(60*time.Second, "the child running", func() bool {
		resp, err := s.Client.GetRunWithResponse(ctx, project, domain, kid)
		require.NoError(t, err)
		return resp.JSON200 != nil && resp.JSON200.Phase == api.PhaseRUNNING
	})
	owned, events := rows(name, kid)

	for _, run := range []string{name, kid} {
		resp := del(run)
		require.Equal(t, http.StatusConflict, resp.StatusCode(), "%s: %s", run, resp.Body)
		require.Equal(t, "not_terminal", resp.ApplicationproblemJSON409.Code)
		require.Contains(t, *resp.ApplicationproblemJSON409.Detail, "is RUNNING")
	}
	nowOwned, nowEvents := rows(name, kid)
	require.Equal(t, owned, nowOwned, "a refused delete changes nothing")
	require.GreaterOrEqual(t, nowEvents, events, "a refused delete deletes no event (the live runs add theirs)")

	touch(t, s, kid, "open")
	waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
	resp := del(name)
	require.NotNil(t, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body)
	require.Equal(t, []string{name, kid}, resp.JSON200.Deleted)
	owned, events = rows(name, kid)
	require.Zero(t, owned+events, "no row of either run left")
	for _, run := range []string{name, kid} {
		got, err := s.Client.GetRunWithResponse(ctx, project, domain, run)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, got.StatusCode(), run)
	}
	require.Equal(t, http.StatusNotFound, del(name).StatusCode(), "gone")
	require.Equal(t, http.StatusNotFound, del("no-such-run").StatusCode())
}
