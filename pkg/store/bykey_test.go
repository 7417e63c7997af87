package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// The by-key pool's plans are made again at a connection's use 16, then
// whenever its uses have doubled since, plus 16, and at least every 10 s.
func TestReplanDueAsAConnectionWorks(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		uses, made int64
		after      time.Duration
		due        bool
	}{
		{15, 0, 0, false},
		{16, 0, 0, true},
		{47, 16, time.Second, false},
		{48, 16, time.Second, true},
		{239, 112, 9 * time.Second, false},
		{240, 112, 0, true},
		{241, 240, 9999 * time.Millisecond, false},
		{241, 240, 10 * time.Second, true},
	} {
		require.Equal(t, c.due, store.ReplanDue(c.uses, c.made, at, at.Add(c.after)),
			"use %d, made at %d, %s after", c.uses, c.made, c.after)
	}
}

// The expiry read, on the by-key pool (index paths alone), reads each kind of
// due work from its partial index, not by walking a table's whole key in
// the order its DISTINCT wants: on 25,000 ended actions never analyzed, a
// plan that counts on the LIMIT to stop such a walk early looked cheaper,
// and read them all at every pass.
func TestExpiryDueReadsItsPartialIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithRows(t,
		`INSERT INTO runs (project, domain, name, spec)
			SELECT project, domain, name || '-' || i, spec FROM runs, generate_series(1, 5000) i WHERE name = 'a'`,
		`INSERT INTO actions (project, domain, run_name, name, kind, phase)
			SELECT project, domain, name, n, 'workflow', 'RUNNING' FROM runs, unnest('{a0,a,b,c,d}'::text[]) n
			WHERE name LIKE 'a-%'`,
		`INSERT INTO tasks (project, domain, run_name, action_name, idx, state)
			SELECT project, domain, run_name, name, 0, 4 FROM actions WHERE run_name LIKE 'a-%'`,
		`UPDATE actions SET ended_at = now() WHERE run_name LIKE 'a-%'`)
	by := store.ByKeyPool(st)
	_, err := by.Tasks().ExpiryDue(ctx, 1000)
	require.NoError(t, err)
	plan := explainPrepared(t, by, "'wait'", "1000, 1000, 1000, 1000, 1000")
	for _, walk := range []string{"actions_pkey", "runs_pkey", "tasks_pkey", "tasks_action_generation_idx"} {
		require.NotContains(t, plan, walk, "a walk of %s:\n%s", walk, plan)
	}
}

// openWithRows opens pools of one connection each (openOneConnectionPools)
// on a database holding a run "a" of one step, runs qs there in order, and
// returns the Store and the database.
func openWithRows(t *testing.T, qs ...string) (*store.Store, *sql.DB) {
	t.Helper()
	st, url := openOneConnectionPools(t)
	newRun(t, st, "a", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}})
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	for _, q := range qs {
		_, err = db.ExecContext(context.Background(), q)
		require.NoError(t, err, q)
	}
	return st, db
}

// the by-key pool's connections run without JIT: one of their statements whose only
// path is a disabled scan is costed above jit_above_cost, and Postgres
// would compile it at every call.
func TestByKeyConnectionsDoNotJIT(t *testing.T) {
	t.Parallel()
	st, _ := openOneConnectionPools(t)
	n, err := store.ByKeyPool(st).Count(context.Background(), `SELECT count(*) WHERE current_setting('jit') = 'off'`)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "jit is on on the by-key pool's connection")
}
