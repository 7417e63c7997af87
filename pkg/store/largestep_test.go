package store_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// largeStep creates run name in st with one noop step "big" of n tasks
// (replicas n: the store does not hold a spec to the API's bound) and a
// step "small" of 2, starts them, and has every task of big SUCCEEDED with
// one attempt on worker w: the rows a finished step of n tasks leaves,
// written by one statement (db is st's database) rather than n reports.
func largeStep(tb testing.TB, st *store.Store, db *sql.DB, name string, n int) domain.RunKey {
	tb.Helper()
	ctx := context.Background()
	spec := domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		{Name: "big", Plugin: domain.PluginNoop, Replicas: &n}, {Name: "small", Plugin: domain.PluginNoop, Replicas: intp(2)}}}
	spec.Normalize()
	key := domain.RunKey{Project: "p", Domain: "d", Run: name}
	if _, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec}); err != nil {
		tb.Fatal(err)
	}
	storetest.StartSteps(tb, st, key)
	w, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w-" + name, Address: "http://127.0.0.1:1", Slots: 8})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `WITH t AS (UPDATE tasks SET state = 4, attempt_count = 1, worker_id = $4,
			ended_at = now() WHERE project = $1 AND domain = $2 AND run_name = $3 AND action_name = 'big' RETURNING id)
		INSERT INTO attempts (task_id, number, worker_id, state, exit_code, created_at, updated_at, started_at,
			finished_at, evaluated_at) SELECT id, 1, $4, 4, 0, now(), now(), now(), now(), now() FROM t`,
		key.Project, key.Domain, key.Run, w.ID); err != nil {
		tb.Fatal(err)
	}
	for _, q := range []string{`VACUUM ANALYZE tasks`, `ANALYZE attempts`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			tb.Fatal(err)
		}
	}
	return key
}

// openBenchWithDB is openWithDB for a benchmark.
func openBenchWithDB(b *testing.B) (*store.Store, *sql.DB) {
	return storetest.NewWithDB(b, store.Config{MaxOpenConns: 4})
}

// BenchmarkGetRunLargeStep times GetRun of a run with a finished step of
// 10,000 tasks (each with its attempt) and one of 2.
func BenchmarkGetRunLargeStep(b *testing.B) {
	st, db := openBenchWithDB(b)
	key := largeStep(b, st, db, "large", 10_000)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.Runs().GetRun(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}

// An action's pages list each of its tasks once, the current generation
// first and each generation in index order, and end with no cursor; the
// counts are the current generation's; GetRun holds the first page with
// the same cursor; a cursor not from a page is ErrBadCursor.
func TestActionPagesListEveryTaskOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	key := largeStep(t, st, db, "paged", 250)
	big := key.Action("big")
	// A second generation of the step, its tasks PENDING, as a retry of
	// the whole step writes them.
	_, err := db.ExecContext(ctx, `UPDATE actions SET generation = 1 WHERE project = $1 AND domain = $2 AND run_name = $3
		AND name = 'big'`, key.Project, key.Domain, key.Run)
	require.NoError(t, err)
	n := 250
	rows := store.NewTaskRows(big, 1, domain.StepTasks(domain.Step{Name: "big", Plugin: domain.PluginNoop, Replicas: &n},
		domain.DefaultMaxSystemFailures, time.Now()))
	require.NoError(t, st.Tasks().InsertTasks(ctx, rows))

	var seen []string
	page := store.TaskPage{Limit: 100}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5, "500 tasks in pages of 100")
		d, err := st.Actions().GetActionPage(ctx, big, page)
		require.NoError(t, err)
		require.Equal(t, map[domain.TaskState]int{domain.TaskPending: 250}, d.TaskCounts, "the current generation's")
		require.Equal(t, 250, d.TaskCount)
		for _, td := range d.Tasks {
			seen = append(seen, fmt.Sprintf("%d/%d", td.Task.Generation, td.Task.Idx))
			require.Len(t, td.Attempts, 1-td.Task.Generation, "generation 0's tasks ran once")
		}
		if d.NextCursor == "" {
			require.Len(t, d.Tasks, 100, "the last page")
			break
		}
		page.Cursor = d.NextCursor
	}
	var want []string
	for _, g := range []int{1, 0} {
		for i := range 250 {
			want = append(want, fmt.Sprintf("%d/%d", g, i))
		}
	}
	require.Equal(t, want, seen)

	run, err := st.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	first, err := st.Actions().GetActionPage(ctx, big, store.TaskPage{Limit: store.RunTasksPerAction})
	require.NoError(t, err)
	require.Equal(t, "big", run.Actions[1].Action.Name)
	requireSameJSON(t, first, run.Actions[1])
	require.Len(t, first.Tasks, store.RunTasksPerAction)
	small := run.Actions[2]
	require.Len(t, small.Tasks, 2)
	require.Empty(t, small.NextCursor)
	require.Equal(t, map[domain.TaskState]int{domain.TaskPending: 2}, small.TaskCounts)
	require.Empty(t, run.Actions[0].TaskCounts, "a0 has no task")

	for limit, want := range map[int]int{0: store.DefaultTaskPageSize, 1: 1, 10_000: store.MaxTaskPageSize} {
		d, err := st.Actions().GetActionPage(ctx, big, store.TaskPage{Limit: limit})
		require.NoError(t, err)
		require.Len(t, d.Tasks, want, "limit %d", limit)
	}
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{"!!", b64("1"), b64("x:1"), b64("-1:2"), b64("1:-2"), b64("1:99999999999"), b64("1:2:3")} {
		_, err := st.Actions().GetActionPage(ctx, big, store.TaskPage{Cursor: c})
		require.ErrorIs(t, err, store.ErrBadCursor, "cursor %q", c)
	}
	_, err = st.Actions().GetActionPage(ctx, key.Action("nope"), store.TaskPage{})
	require.ErrorIs(t, err, store.ErrNotFound)
}
