package e2e

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// TestReportBatchFaults: an executor's report batch is recorded once, in
// one transaction, whatever dies around it. A batch carrying final reports
// of a step's four attempts is held inside the api's transaction (a test
// transaction holds the tasks' row locks it waits for), then:
//   - the api is killed (kill -9) and restarted: its transaction never
//     committed, and the executor's retry of the batch records it, so every
//     task succeeded on its first attempt;
//   - the executor is killed (kill -9) with the batch in flight: the api
//     records what it received all the same, so the tasks of that batch
//     are not run again (those whose reports were still queued in the
//     executor die with it and run again on another one).
//
// Either way every task has one SUCCEEDED attempt, evaluated once.
//
// The api's restart stops the executor's heartbeats (and one that rode
// along with the held batch waits with it), so that subtest runs with
// a worker grace longer than a restart under the suite's load: a worker
// declared dead would have its tasks run again.
func TestReportBatchFaults(t *testing.T) {
	t.Parallel()
	t.Run("APIKilledBeforeCommit", func(t *testing.T) {
		t.Parallel()
		s, db := batchFaultsStack(t, "CAPSTAN_WORKER_GRACE=30s")
		name := heldBatch(t, s, db, func() {
			s.Kill("api")
			s.StartService("api")
		})
		s.AwaitReady(s.APIURL, 30*time.Second)
		requireOnceEach(t, s, db, name, 4)
	})
	t.Run("ExecutorKilledWithBatchInFlight", func(t *testing.T) {
		t.Parallel()
		s, db := batchFaultsStack(t)
		name := heldBatch(t, s, db, func() { s.Kill("executor-1") })
		s.StartExecutor(2) // where a task runs again if its report died with executor-1
		requireOnceEach(t, s, db, name, 1)
	})
}

// batchFaultsStack starts a stack of one executor, with env added to every
// service, and opens its database.
func batchFaultsStack(t *testing.T, env ...string) (*Stack, *sql.DB) {
	t.Helper()
	s := Start(t, bins, Options{Executors: 1, Env: env})
	db, err := sql.Open("pgx", s.DBURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return s, db
}

// heldBatch starts a run of four `sleep 1` tasks, waits until they run,
// locks their task rows in a transaction of its own, waits until the api's
// batch transaction waits for those locks (the final reports are in it),
// calls fault, then releases the locks. It returns the run's name.
func heldBatch(t *testing.T, s *Stack, db *sql.DB, fault func()) string {
	t.Helper()
	ctx := context.Background()
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "s", Command: ptr("sleep 1"), Replicas: ptr(4)}}})
	waitRun(t, s, name, 30*time.Second, "four attempts running", func(r *api.Run) bool {
		n := 0
		for _, task := range action(r, "s").Tasks {
			if k := len(task.Attempts); k > 0 && task.Attempts[k-1].State == api.TaskStateRUNNING {
				n++
			}
		}
		return n == 4
	})
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // committed below; a failed test rolls back
	_, err = tx.ExecContext(ctx, `SELECT id FROM tasks WHERE run_name = $1 FOR UPDATE`, name)
	require.NoError(t, err)
	s.Eventually(30*time.Second, "the report batch waits inside the api's transaction", func() bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%tasks%' AND pid <> pg_backend_pid()`).Scan(&n))
		return n > 0
	})
	fault()
	require.NoError(t, tx.Commit())
	return name
}

// requireOnceEach waits for run name to succeed and checks that each of
// its tasks succeeded once, was evaluated once, and that at least
// firstTry of them did on their first attempt (the tasks whose final
// report was in the held batch; reports still queued in a killed executor
// die with it, and their tasks run again).
func requireOnceEach(t *testing.T, s *Stack, db *sql.DB, name string, firstTry int) {
	t.Helper()
	run := waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
	single := 0
	for _, task := range action(run, "s").Tasks {
		var states []api.TaskState
		for _, a := range task.Attempts {
			states = append(states, a.State)
		}
		t.Logf("task %d: %v", task.Index, states)
		require.Equal(t, len(states)-1, slices.Index(states, api.TaskStateSUCCEEDED),
			"task %d: one SUCCEEDED attempt, its last", task.Index)
		if len(states) == 1 {
			single++
		}
	}
	require.GreaterOrEqual(t, single, firstTry, "tasks that succeeded on their first attempt")
	var evaluated int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM run_events WHERE run_name = $1 AND type = 'task.NO_RETRY'`,
		name).Scan(&evaluated))
	require.Equal(t, 4, evaluated, "each task's success evaluated once")
}
