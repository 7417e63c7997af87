package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// NextWakeAt runs on Pass's connection, which keeps the generic plan of its
// first calls: made on nearly empty tables, it reads the partial index of
// the waiting actions, not every action, once they have grown. A plan
// that took the time as a constant, or read actions through another index,
// would scan them.
func TestNextWakeAtKeepsAPlanOfTheWaitingIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, url := openOneConnectionPools(t)
	key := newRun(t, st, "r", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}})
	for range 6 {
		at, err := store.PassConn(st).Placement().NextWakeAt(ctx)
		require.NoError(t, err)
		require.Nil(t, at)
	}
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	wakeAt := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	// 5,000 actions that wait for nothing, and one timed wait.
	_, err = db.ExecContext(ctx, `INSERT INTO actions (project, domain, run_name, name, kind)
		SELECT $1, $2, $3, 'x' || i, 'step' FROM generate_series(1, 5000) i`, key.Project, key.Domain, key.Run)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO actions (project, domain, run_name, name, kind, waiting_for, not_before)
		VALUES ($1, $2, $3, 'w', 'step', $4, $5)`, key.Project, key.Domain, key.Run, store.WaitRetry, wakeAt)
	require.NoError(t, err)
	at, err := store.PassConn(st).Placement().NextWakeAt(ctx)
	require.NoError(t, err)
	require.NotNil(t, at)
	require.True(t, wakeAt.Equal(*at), "wake at %s, want %s", at, wakeAt)
	_, generic, custom, err := store.PassConn(st).PreparedPlans(ctx, "min(not_before)")
	require.NoError(t, err)
	require.Equal(t, int64(7), generic, "generic plans")
	require.Zero(t, custom, "custom plans")
	now := "'" + time.Now().UTC().Format(time.RFC3339Nano) + "'"
	plan := explainPrepared(t, store.PassConn(st), "min(not_before)", now+", "+now) // @now, twice
	require.Contains(t, plan, "actions_waiting")
	require.NotContains(t, plan, "Seq Scan")
}

// PlaceableWorkers reads the tasks of the live attempts by their key, not
// by a scan of every task, on the statistics of a new database (its tables
// never analyzed): a pass costs what the live attempts do.
func TestPlaceableWorkersReadsLiveTasksByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, url := openOneConnectionPools(t)
	key := newRun(t, st, "r", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: intp(20)}}})
	storetest.StartSteps(t, st, key)
	w := registerWorker(t, st)
	d, err := st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	for _, td := range d.Tasks {
		_, ok, err := storetest.AssignTask(ctx, st, td.Task.ID, w.ID)
		require.NoError(t, err)
		require.True(t, ok)
	}
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	// 2,000 tasks that ended, each with its attempt.
	_, err = db.ExecContext(ctx, `INSERT INTO tasks (project, domain, run_name, action_name, idx, state)
		SELECT $1, $2, $3, 's', 100 + i, $4 FROM generate_series(1, 2000) i`, key.Project, key.Domain, key.Run, domain.TaskSucceeded)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO attempts (task_id, number, worker_id, state)
		SELECT id, 1, $1, state FROM tasks WHERE state = $2`, w.ID, domain.TaskSucceeded)
	require.NoError(t, err)
	workers, err := store.ByKeyPool(st).Placement().PlaceableWorkers(ctx, time.Minute)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	require.Equal(t, 20, workers[0].Used)
	plan := explainPrepared(t, store.ByKeyPool(st), "CROSS JOIN LATERAL", "60")
	require.Contains(t, plan, "tasks_pkey")
	require.NotContains(t, plan, "Seq Scan on tasks")
}

// explainPrepared returns the plan of the statement prepared on st's
// connection whose text contains substr, executed with args (SQL
// literals, comma-separated).
func explainPrepared(t *testing.T, st *store.Store, substr, args string) string {
	t.Helper()
	name, _, _, err := st.PreparedPlans(context.Background(), substr)
	require.NoError(t, err)
	plan, err := st.Explain(context.Background(), "EXECUTE "+name+"("+args+")")
	require.NoError(t, err)
	return plan
}
