package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// An outage of the control plane does not kill the fleet: with the api
// down, or Postgres frozen, for three worker graces, no heartbeat is
// recorded, yet no worker is declared dead and every task finishes on its
// first attempt. The scheduler's liveness fence restarts every worker's
// grace after the outage (heartbeat_path_down, scheduler_gap or
// round_trip_failed in its log).

// outageGrace is the worker grace of the outage tests' stacks (their
// heartbeats go every 300 ms: testEnv).
const outageGrace = 2 * time.Second

var outageEnv = []string{"CAPSTAN_WORKER_GRACE=" + outageGrace.String()}

// outageRun submits a run of n tasks that sleep secs and waits until every
// one runs; it returns the run's name.
func outageRun(t *testing.T, s *Stack, n, secs int) string {
	t.Helper()
	name := submitRun(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "sleepers", Replicas: ptr(n),
		Command: ptr("sleep " + strconv.Itoa(secs))}}})
	waitOrExplain(t, s, name, "sleepers", 60*time.Second, "every task running", func() bool {
		tasks := stepTasks(t, s, name, "sleepers")
		if len(tasks) != n {
			return false
		}
		for _, task := range tasks {
			if task.State != api.TaskStateRUNNING {
				return false
			}
		}
		return true
	})
	return name
}

// requireFirstAttempts checks that run name succeeded with every task on
// its first attempt, on one of the workers ids, none WORKER_FAILED, and
// that those workers are still alive under the same identity.
func requireFirstAttempts(t *testing.T, s *Stack, name string, ids []string) {
	t.Helper()
	run := waitPhase(t, s, name, 90*time.Second, api.PhaseSUCCEEDED)
	for _, task := range action(run, "sleepers").Tasks {
		require.Equal(t, api.TaskStateSUCCEEDED, task.State, "task %d", task.Index)
		require.Len(t, task.Attempts, 1, "task %d finished on its first attempt: %+v", task.Index, task.Attempts)
		require.Zero(t, task.PreemptionCount, "task %d", task.Index)
		require.Contains(t, ids, *task.Attempts[0].WorkerId)
	}
	for _, id := range ids {
		w := workerByID(t, s, id)
		require.NotNil(t, w, "worker %s still registered", id)
		require.Equal(t, api.WorkerStateAlive, w.State, "worker %s never declared dead", id)
	}
}

// graceRestarts returns the reasons of the "worker grace restarted" lines
// of process name's log.
func graceRestarts(t *testing.T, s *Stack, name string) []string {
	t.Helper()
	b, err := os.ReadFile(s.Proc(name).Log)
	require.NoError(t, err)
	var reasons []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["msg"] == "worker grace restarted" {
			r, _ := rec["reason"].(string)
			reasons = append(reasons, r)
		}
	}
	return reasons
}

// awaitWatch waits until the scheduler's liveness pass has run in the
// last second: an outage then interrupts a control plane that worked.
func awaitWatch(t *testing.T, s *Stack, db *sql.DB) {
	t.Helper()
	s.Eventually(30*time.Second, "the scheduler's liveness pass running", func() bool {
		var watching bool
		require.NoError(t, db.QueryRow(`SELECT coalesce(checked_at > now() - interval '1 second', false)
			FROM liveness_watch`).Scan(&watching))
		return watching
	})
}

// TestAPIOutageKillsNoWorker: the api is killed while tasks run and
// restarted once no heartbeat has been recorded for three graces.
func TestAPIOutageKillsNoWorker(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 2, Env: outageEnv})
	ids := []string{workerID(t, s, 1), workerID(t, s, 2)}
	name := outageRun(t, s, 4, 25)
	db := openDB(t, s)
	awaitWatch(t, s, db)

	s.Kill("api")
	s.Eventually(60*time.Second, "no heartbeat recorded for three graces", func() bool {
		var alive int
		var silent bool
		require.NoError(t, db.QueryRow(`SELECT count(*), coalesce(bool_and(last_heartbeat_at < now() - make_interval(secs => $1)), false)
			FROM workers WHERE state = 'alive'`, (3*outageGrace).Seconds()).Scan(&alive, &silent))
		require.Equal(t, len(ids), alive, "no worker is declared dead while the api is down")
		return silent
	})
	s.StartService("api")
	s.AwaitReady(s.APIURL, 15*time.Second)

	requireFirstAttempts(t, s, name, ids)
	require.Contains(t, graceRestarts(t, s, "scheduler"), "heartbeat_path_down")
}

// TestPostgresPauseKillsNoWorker: every process of the stack's Postgres (a
// private server: the shared one must never be paused) is stopped with
// SIGSTOP while tasks run, for three graces, then continued.
func TestPostgresPauseKillsNoWorker(t *testing.T) {
	t.Parallel()
	pg := StartPostgres(t)
	s := Start(t, bins, Options{Executors: 2, Env: outageEnv, DatabaseURL: pg.URL})
	ids := []string{workerID(t, s, 1), workerID(t, s, 2)}
	name := outageRun(t, s, 4, 25)
	db := openDB(t, s)
	awaitWatch(t, s, db)
	before := len(graceRestarts(t, s, "scheduler"))

	pg.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	require.Error(t, db.PingContext(ctx), "Postgres answers nothing while paused")
	cancel()
	<-time.After(3 * outageGrace) // the outage's length: a fault lasting three graces, not a wait
	pg.Resume()

	requireFirstAttempts(t, s, name, ids)
	after := graceRestarts(t, s, "scheduler")
	require.Greater(t, len(after), before, "the scheduler gave every worker a fresh grace after the pause: %v", after)
}
