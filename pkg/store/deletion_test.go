package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// rowsOf counts the rows of the runs named in every table a run owns.
func rowsOf(t *testing.T, db *sql.DB, names ...string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for table, q := range map[string]string{
		"runs":            `SELECT count(*) FROM runs WHERE name = ANY($1)`,
		"actions":         `SELECT count(*) FROM actions WHERE run_name = ANY($1)`,
		"tasks":           `SELECT count(*) FROM tasks WHERE run_name = ANY($1)`,
		"attempts":        `SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.run_name = ANY($1)`,
		"run_events":      `SELECT count(*) FROM run_events WHERE run_name = ANY($1)`,
		"orphan_attempts": `SELECT count(*) FROM attempts a WHERE cardinality($1::text[]) > 0 AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = a.task_id)`,
		"attempt_logs": `SELECT count(*) FROM attempt_logs l JOIN attempts a ON a.id = l.attempt_id JOIN tasks t ON t.id = a.task_id
			WHERE t.run_name = ANY($1)`,
		"attempt_log_chunks": `SELECT count(*) FROM attempt_log_chunks l JOIN attempts a ON a.id = l.attempt_id
			JOIN tasks t ON t.id = a.task_id WHERE t.run_name = ANY($1)`,
		"orphan_logs": `SELECT count(*) FROM (SELECT attempt_id FROM attempt_logs UNION ALL SELECT attempt_id FROM attempt_log_chunks) l
			WHERE cardinality($1::text[]) > 0 AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.id = l.attempt_id)`,
	} {
		var n int
		require.NoError(t, db.QueryRow(q, names).Scan(&n), table)
		out[table] = n
	}
	return out
}

// TestDeleteRun deletes an ended run with its ended child run and every
// row they own, leaving another run whole, and names the alive workers
// that ran their attempts (not a dead one); it refuses a live run, a run
// with a live child, a child of a live parent, and an ended run whose
// abort is being delivered or whose attempt is live, changing nothing.
func TestDeleteRun(t *testing.T) {
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	ctx := context.Background()
	parent := largeStep(t, st, db, "parent", 3)
	other := largeStep(t, st, db, "other", 2)
	leaf := domain.WorkflowSpec{Steps: []domain.Step{{Name: "t", Plugin: domain.PluginNoop}}}
	leaf.Normalize()
	kid := domain.RunKey{Project: "p", Domain: "d", Run: "parent-big-0"}
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return tx.Runs().CreateChildRuns(ctx, []store.NewRun{{Key: kid, Spec: leaf,
			Child: &store.ChildOf{Parent: parent.Action("big"), Depth: 1}}})
	}))
	end := func(name string) {
		_, err := db.Exec(`UPDATE runs SET phase = 'SUCCEEDED', ended_at = now() WHERE name = $1`, name)
		require.NoError(t, err)
	}
	_, err := db.Exec(`INSERT INTO attempt_logs (attempt_id, stdout) SELECT id, 'out' FROM attempts;
		INSERT INTO attempt_log_chunks (attempt_id, stream, data, byte_offset) SELECT id, 'stdout', 'out', 0 FROM attempts`)
	require.NoError(t, err)
	before := rowsOf(t, db, "parent", kid.Run)
	require.Positive(t, before["attempts"])
	require.Equal(t, before["attempts"], before["attempt_log_chunks"])

	_, err = st.Runs().DeleteRun(ctx, parent)
	var nt *store.NotTerminalError
	require.ErrorAs(t, err, &nt)
	require.ErrorIs(t, err, store.ErrNotTerminal)
	end("parent")
	_, err = st.Runs().DeleteRun(ctx, parent)
	require.ErrorAs(t, err, &nt, "its child has not ended")
	require.Equal(t, kid.Run, nt.Run)
	require.Equal(t, before, rowsOf(t, db, "parent", kid.Run), "a refused delete changes nothing")

	_, err = db.Exec(`UPDATE runs SET phase = 'RUNNING', ended_at = NULL WHERE name = 'parent'`)
	require.NoError(t, err)
	end(kid.Run)
	_, err = st.Runs().DeleteRun(ctx, kid)
	require.ErrorAs(t, err, &nt, "its parent has not ended")
	require.Equal(t, "parent", nt.Run)

	end(other.Run)
	for _, q := range []struct{ set, undo string }{
		{`UPDATE actions SET abort_requested_at = now() WHERE run_name = 'other' AND name = 'a0'`,
			`UPDATE actions SET abort_requested_at = NULL WHERE run_name = 'other'`},
		{fmt.Sprintf(`UPDATE attempts SET state = %d WHERE task_id = (SELECT min(id) FROM tasks WHERE run_name = 'other')`,
			domain.TaskRunning),
			fmt.Sprintf(`UPDATE attempts SET state = %d WHERE task_id IN (SELECT id FROM tasks WHERE run_name = 'other')`,
				domain.TaskSucceeded)},
	} {
		_, err := db.Exec(q.set)
		require.NoError(t, err)
		_, err = st.Runs().DeleteRun(ctx, other)
		require.ErrorIs(t, err, store.ErrAbortPending, "an ended run whose abort is delivering or whose attempt is live: %s", q.set)
		_, err = db.Exec(q.undo)
		require.NoError(t, err)
	}

	end("parent")
	var alive string
	require.NoError(t, db.QueryRow(`SELECT id FROM workers WHERE name = 'w-parent'`).Scan(&alive))
	dead, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w-dead", Address: "http://127.0.0.1:2", Slots: 1})
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE workers SET state = 'dead' WHERE id = $1`, dead.ID)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE attempts SET worker_id = $1 WHERE task_id = (SELECT min(id) FROM tasks WHERE run_name = 'parent')`,
		dead.ID)
	require.NoError(t, err)
	otherRows := rowsOf(t, db, other.Run)
	deleted, err := st.Runs().DeleteRun(ctx, parent)
	require.NoError(t, err)
	require.Equal(t, store.DeletedRuns{Runs: []string{"parent", kid.Run}, Workers: []string{alive}}, deleted,
		"the alive worker of its attempts, once; not the dead one")
	require.Equal(t, map[string]int{"runs": 0, "actions": 0, "tasks": 0, "attempts": 0, "run_events": 0,
		"orphan_attempts": 0, "attempt_logs": 0, "attempt_log_chunks": 0, "orphan_logs": 0}, rowsOf(t, db, "parent", kid.Run))
	require.Positive(t, otherRows["attempt_logs"])
	require.Equal(t, otherRows, rowsOf(t, db, other.Run), "another run stays whole")
	_, err = st.Runs().DeleteRun(ctx, parent)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// RunTree names a run and its descendants, the tree DeleteRun deletes:
// the run first, then level by level, each by name; another run's tree is
// not in it; an unknown run is ErrNotFound.
func TestRunTree(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	leaf := domain.WorkflowSpec{Steps: []domain.Step{{Name: "t", Plugin: domain.PluginNoop}}}
	leaf.Normalize()
	key := func(name string) domain.RunKey { return domain.RunKey{Project: "p", Domain: "d", Run: name} }
	for _, r := range []struct{ name, parent string }{{"top", ""}, {"other", ""}, {"top-w-1", "top"}, {"top-w-0", "top"},
		{"top-w-0-v-0", "top-w-0"}, {"other-w-0", "other"}} {
		nr := store.NewRun{Key: key(r.name), Spec: leaf}
		if r.parent == "" {
			_, _, err := st.Runs().CreateRun(ctx, nr)
			require.NoError(t, err)
			continue
		}
		nr.Child = &store.ChildOf{Parent: key(r.parent).Action("t"), Depth: strings.Count(r.name, "-") / 2}
		require.NoError(t, st.Runs().CreateChildRuns(ctx, []store.NewRun{nr}))
	}
	tree, err := st.Runs().RunTree(ctx, key("top"))
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{key("top"), key("top-w-0"), key("top-w-1"), key("top-w-0-v-0")}, tree)
	tree, err = st.Runs().RunTree(ctx, key("top-w-0"))
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{key("top-w-0"), key("top-w-0-v-0")}, tree)
	_, err = st.Runs().RunTree(ctx, key("nope"))
	require.ErrorIs(t, err, store.ErrNotFound)
}
