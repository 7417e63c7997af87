package e2e

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/api"
)

// Flyte's handleAbortAndFinalize, end to end: aborting a serializable cached
// shell step whose command started a tree of processes leaves none of them,
// and the run's events show, in this order, the plugin's Abort, its
// Finalize, the release of the cache reservation and the ABORTED event.
func TestAbortFinalizes(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 1})
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "tree", KillGrace: ptr("1s"),
		Cache: &api.CacheSpec{Version: "v1", Serializable: ptr(true)},
		Command: ptr(bgHostPid("sleep 600", `"$CAPSTAN_RUN_DIR/a"`) + `
		(` + hostPidTo(`"$CAPSTAN_RUN_DIR/c"`) + "; " + bgHostPid("sleep 600", `"$CAPSTAN_RUN_DIR/b"`) + ` wait) &
		wait`)}}})
	var pids []int
	for _, f := range []string{"a", "b", "c"} {
		pids = append(pids, pidIn(t, s, filepath.Join(runDir(s, name), f)))
	}
	abortRun(t, s, name, "enough")
	waitPhase(t, s, name, 30*time.Second, api.PhaseABORTED)
	for _, pid := range pids {
		s.Eventually(10*time.Second, "pid "+strconv.Itoa(pid)+" gone", func() bool { return ProcessGone(pid) })
	}
	want := []string{"plugin_abort", "plugin_finalize", "cache_released", "action.aborted"}
	var got []string
	s.Eventually(30*time.Second, "the abort's events", func() bool {
		got = finalizationEvents(t, s, name)
		return len(got) == len(want)
	})
	require.Equal(t, want, got, "Abort, Finalize, release, ABORTED, in that order")
}

// finalizationEvents lists the run's events of the finalization steps, in
// the order they were written.
func finalizationEvents(t *testing.T, s *Stack, run string) []string {
	t.Helper()
	db, err := sql.Open("pgx", s.DBURL)
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.QueryContext(context.Background(),
		`SELECT type FROM run_events WHERE run_name = $1 ORDER BY id`, run)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		if slices.Contains([]string{"plugin_abort", "plugin_finalize", "cache_released", "action.aborted"}, typ) {
			out = append(out, typ)
		}
	}
	require.NoError(t, rows.Err())
	return out
}
