package store_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// plan returns the EXPLAIN text of the generic plan of query on conn, made
// while its tables are as the caller left them.
func plan(t *testing.T, conn *sql.Conn, query string, args ...string) string {
	t.Helper()
	ctx := context.Background()
	_, err := conn.ExecContext(ctx, "PREPARE q AS "+query)
	require.NoError(t, err)
	defer func() { _, _ = conn.ExecContext(ctx, "DEALLOCATE q") }()
	rows, err := conn.QueryContext(ctx, "EXPLAIN EXECUTE q("+strings.Join(args, ", ")+")")
	require.NoError(t, err)
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}

// TestLookupsNeverTakeAListingIndex checks the planner on a new database
// (no statistics yet), with the generic plan a pooled connection keeps:
// a lookup by key takes the key's index, never a listing index that shares
// its leading columns; and each listing can still take its index.
func TestLookupsNeverTakeAListingIndex(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("pgx", storetest.NewURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	// run_events is partitioned: its lookup takes run_events_run in each
	// partition, where the index is named after its columns.
	for query, index := range map[string]string{
		"SELECT * FROM runs WHERE project = $1 AND domain = $2 AND name = $3 FOR UPDATE":                        "runs_pkey",
		"UPDATE runs SET version = version + 1 WHERE project = $1 AND domain = $2 AND name = $3":                "runs_pkey",
		"SELECT * FROM cache_entries WHERE project = $1 AND domain = $2 AND key = $3":                           "cache_entries_pkey",
		"SELECT * FROM run_events WHERE project = $1 AND domain = $2 AND run_name = $3 AND id > $4 ORDER BY id": "_project_domain_run_name_id_idx",
	} {
		args := []string{"'p'", "'d'", "'r'"}
		if strings.Contains(query, "$4") {
			args = append(args, "0")
		}
		p := plan(t, conn, query, args...)
		require.Contains(t, p, index, query)
		require.NotContains(t, p, "_project_domain_id_idx", query)
		require.NotContains(t, p, "Seq Scan", query)
	}
	// Listings, with no other way than their index.
	_, err = conn.ExecContext(ctx, "SET enable_seqscan = off; SET enable_sort = off; SET enable_bitmapscan = off")
	require.NoError(t, err)
	for query, index := range map[string]string{
		"SELECT * FROM runs WHERE project = $1 AND domain = $2 AND " + store.SQLListedByCreation +
			" ORDER BY created_at DESC, name DESC LIMIT 51": "runs_list",
		"SELECT * FROM cache_entries WHERE project = $1 AND domain = $2 AND " + store.SQLListedByCreation +
			" ORDER BY created_at DESC, key DESC LIMIT 51": "cache_entries_created",
		"SELECT * FROM run_events WHERE project = $1 AND domain = $2 AND " + store.SQLListedByID +
			" AND id > 7 ORDER BY id LIMIT 100": "_project_domain_id_idx", // run_events_scope, in each partition
	} {
		require.Contains(t, plan(t, conn, query, "'p'", "'d'"), index, query)
	}
}

// TestFreshBindReadsTasksByKey checks the generic plan AssignTasks'
// statement gets in a start's transaction on the main pool, made on a
// young database (200 tasks, never analyzed) and kept as the tables grow:
// after FreshWork, it reaches the tasks and actions it binds by key; made
// without FreshWork's settings, the same plan scans a table whole.
func TestFreshBindReadsTasksByKey(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	for _, q := range []string{
		`INSERT INTO runs (project, domain, name, spec) SELECT 'p', 'd', 'r' || g, '{}' FROM generate_series(1, 200) g`,
		`INSERT INTO actions (project, domain, run_name, name, kind, spec)
			SELECT 'p', 'd', 'r' || g, 's', 'task', '{}' FROM generate_series(1, 200) g`,
		`INSERT INTO tasks (project, domain, run_name, action_name, idx, plugin, state)
			SELECT 'p', 'd', 'r' || g, 's', 0, 'noop', 4 FROM generate_series(1, 200) g`,
	} {
		require.NoError(t, st.Exec(ctx, q))
	}
	params := strings.NewReplacer("@ids", "$1", "@workers", "$2", "@assigned", "$3::int", "@pending", "$4::int",
		"@now", "$5::timestamptz", "@running", "$6::text", "@waiting", "($7::text, $8::text)")
	bindPlan := func(fresh bool) (out string) {
		t.Helper()
		require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
			if fresh {
				if _, _, err := tx.Placement().FreshWork(ctx, []domain.RunKey{{Project: "p", Domain: "d", Run: "r1"}}, time.Minute); err != nil {
					return err
				}
			}
			if err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
				return err
			}
			if err := tx.Exec(ctx, "PREPARE fresh_bind AS "+params.Replace(store.AssignTasksSQL)); err != nil {
				return err
			}
			defer func() { _ = tx.Exec(ctx, "DEALLOCATE fresh_bind") }()
			var err error
			out, err = tx.Explain(ctx, `EXECUTE fresh_bind('{1}', '{00000000-0000-4000-8000-000000000001}', 9, 1, now(),
				'RUNNING', 'QUEUED', 'WAITING_FOR_RESOURCES')`)
			return err
		}))
		return out
	}
	require.Contains(t, bindPlan(false), "Seq Scan", "planned on the main pool's settings")
	p := bindPlan(true)
	require.NotContains(t, p, "Seq Scan", p)
}
