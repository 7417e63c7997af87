package store_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

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
	for query, index := range map[string]string{
		"SELECT * FROM runs WHERE project = $1 AND domain = $2 AND name = $3 FOR UPDATE":                        "runs_pkey",
		"UPDATE runs SET version = version + 1 WHERE project = $1 AND domain = $2 AND name = $3":                "runs_pkey",
		"SELECT * FROM cache_entries WHERE project = $1 AND domain = $2 AND key = $3":                           "cache_entries_pkey",
		"SELECT * FROM run_events WHERE project = $1 AND domain = $2 AND run_name = $3 AND id > $4 ORDER BY id": "run_events_run",
	} {
		args := []string{"'p'", "'d'", "'r'"}
		if strings.Contains(query, "$4") {
			args = append(args, "0")
		}
		require.Contains(t, plan(t, conn, query, args...), index, query)
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
			" AND id > 7 ORDER BY id LIMIT 100": "run_events_scope",
	} {
		require.Contains(t, plan(t, conn, query, "'p'", "'d'"), index, query)
	}
}
