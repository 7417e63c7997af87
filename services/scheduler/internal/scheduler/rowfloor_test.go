package scheduler

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// TestRowFloorWritesWhatARunWrites holds the row floor that `make bench`
// measures (storetest.RowFloorScript) to a single-task run made by the
// store and the scheduler: in each table the same rows inserted and
// updated (pg_stat_user_tables), the same events in the same order, and
// the same final rows.
func TestRowFloorWritesWhatARunWrites(t *testing.T) {
	ctx := context.Background()
	admin, err := sql.Open("pgx", storetest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	client := asynq.NewClient(redistest.New(t))
	t.Cleanup(func() { client.Close() })
	log := slog.New(slog.DiscardHandler)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}}
	spec.Normalize()

	run := &xactMeter{db: admin, url: storetest.NewURL(t)}
	run.phase(t, nil, func(st *store.Store) {
		w, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
		if err != nil {
			t.Fatal(err)
		}
		s := New(st, queue.NewEnqueuer(client, log), log, prometheus.NewRegistry(), Config{Retry: domain.Table{0}})
		s.setLeader(true) // a lone replica: its starts bind their tasks
		singleTaskRun(t, st, s, w, spec, "one")
	})

	floor := &xactMeter{db: admin, url: storetest.NewURL(t)}
	fdb, err := sql.Open("pgx", floor.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := fdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	name, err := storetest.RunRowFloor(ctx, conn, 1)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	fdb.Close()
	floor.quiet(t)

	got, want := rowWrites(t, floor.url, name), rowWrites(t, run.url, "one")
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s:\n row floor %s\n run       %s", k, got[k], w)
		}
	}
}

// rowWrites describes what was written to the database at url, run name
// being the only run in it: each table's counts of inserted and updated
// rows (a partitioned table's, run_events', summed over its partitions),
// its events, and its final rows without the columns that differ from one
// run to another (names, ids, times).
func rowWrites(t *testing.T, url, name string) map[string]string {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	for k, q := range map[string]string{
		"writes": `SELECT json_agg(x ORDER BY relname) FROM (SELECT coalesce(pg_partition_root(relid), relid)::regclass::text AS relname,
			sum(n_tup_ins) AS n_tup_ins, sum(n_tup_upd) AS n_tup_upd FROM pg_stat_user_tables GROUP BY 1) x
			WHERE relname IN ('runs', 'actions', 'tasks', 'attempts', 'run_events')`,
		"events": `SELECT json_agg(x ORDER BY id) FROM (SELECT id, action_name, type, task_id IS NOT NULL AS task,
			attempt_id IS NOT NULL AS attempt, CASE WHEN type = 'task.assigned' THEN '{}' ELSE data END AS data
			FROM run_events WHERE run_name = $1) x`,
		"runs": `SELECT json_agg(x) FROM (SELECT spec, phase, version, timeout_ms, ended_at IS NOT NULL AS ended
			FROM runs WHERE name = $1) x`,
		"actions": `SELECT json_agg(x ORDER BY name) FROM (SELECT name, parent_action_name, kind, spec, depends_on, phase,
			version, generation, started_at IS NOT NULL AS started, ended_at IS NOT NULL AS ended
			FROM actions WHERE run_name = $1) x`,
		"tasks": `SELECT json_agg(x) FROM (SELECT action_name, idx, state, attempt_count, version, priority, plugin,
			worker_id IS NOT NULL AS bound, pending_reason, ended_at IS NOT NULL AS ended FROM tasks WHERE run_name = $1) x`,
		"attempts": `SELECT json_agg(x) FROM (SELECT a.number, a.state, a.exit_code, a.error, a.cause,
			a.worker_id IS NOT NULL AS bound, a.started_at IS NOT NULL AS started, a.finished_at IS NOT NULL AS finished,
			a.evaluated_at IS NOT NULL AS evaluated FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.run_name = $1) x`,
	} {
		var args []any
		if k != "writes" {
			args = append(args, name)
		}
		var s sql.NullString
		if err := db.QueryRow(q, args...).Scan(&s); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out[k] = s.String
	}
	return out
}

// TestHistoryWritesWhatARunLeaves holds the history `make bench` loads
// (storetest.LoadHistory) to a single-task run made by the store and the
// scheduler, with and without a ttl: in each table the same final rows, the
// same events in the same order, and the same expiry.
func TestHistoryWritesWhatARunLeaves(t *testing.T) {
	ctx := context.Background()
	client := asynq.NewClient(redistest.New(t))
	t.Cleanup(func() { client.Close() })
	log := slog.New(slog.DiscardHandler)
	for _, ttl := range []time.Duration{0, time.Minute} {
		spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}}
		if ttl > 0 {
			spec.TTL = &domain.TTL{AfterCompletion: ttl.String()}
		}
		spec.Normalize()
		runURL := storetest.NewURL(t)
		st, err := store.Open(ctx, runURL, store.Config{MaxOpenConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		w, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
		if err != nil {
			t.Fatal(err)
		}
		s := New(st, queue.NewEnqueuer(client, log), log, prometheus.NewRegistry(), Config{Retry: domain.Table{0}})
		s.setLeader(true)
		singleTaskRun(t, st, s, w, spec, "one")
		st.Close()

		loadURL := storetest.NewURL(t)
		db, err := sql.Open("pgx", loadURL)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := storetest.LoadHistory(ctx, db, storetest.History{Project: "p", Domain: "d", Prefix: "h", First: 7, N: 3,
			Start: time.Now().Add(-time.Hour), Every: time.Millisecond, Took: 5 * time.Millisecond, AfterCompletion: ttl}); err != nil {
			t.Fatal(err)
		}
		db.Close()

		got, want := rowWrites(t, loadURL, "h7"), rowWrites(t, runURL, "one")
		delete(got, "writes")
		delete(want, "writes")
		got["expiry"], want["expiry"] = retentionOf(t, loadURL, "h7"), retentionOf(t, runURL, "one")
		for k, w := range want {
			if got[k] != w {
				t.Errorf("ttl %s, %s:\n history %s\n run     %s", ttl, k, got[k], w)
			}
		}
	}
}

// retentionOf is run name's ttl columns and how long after its end it expires.
func retentionOf(t *testing.T, url, name string) string {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var s sql.NullString
	if err := db.QueryRow(`SELECT json_agg(x) FROM (SELECT ttl_success_ms, ttl_failure_ms, expires_at - ended_at AS after
		FROM runs WHERE name = $1) x`, name).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s.String
}
