package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	dom "github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// Replication: what docs/operations.md says scales, proven with real
// processes. Two apis, two schedulers, two abort reconcilers and three
// executors (the third reports to the second api) share one Postgres and
// one Redis.
const (
	replicatedRuns   = 200 // runs spread over both apis
	replicatedAborts = 50  // aborts in flight when a reconciler dies
	// failoverTarget is the target for lead lost → first placement
	// by the new leader.
	failoverTarget = 5 * time.Second
	// leaderMsg is what a scheduler logs when it takes the lead.
	leaderMsg = `"msg":"became scheduling leader"`
)

// TestReplication kills -9 the leading scheduler in the middle of 200 runs
// (the other takes the lead; every run succeeds, no task succeeds twice)
// and one abort reconciler while 50 aborts are in flight (every abort is
// delivered, once). The schedulers run with their production tick (1s), so
// the failover figure it logs is the one a deployment sees.
func TestReplication(t *testing.T) {
	var api2 string
	s := Start(t, bins, Options{Executors: 2,
		Env: []string{"CAPSTAN_EXECUTOR_SLOTS=20", "CAPSTAN_SCHEDULER_TICK=1s"},
		ExecutorEnv: func(i int) []string {
			if i == 3 {
				return []string{"CAPSTAN_API_URL=" + api2}
			}
			return nil
		}})
	api2 = s.StartAPI(2)
	s.StartExecutor(3)
	s.StartService("scheduler-2")
	s.StartService("abort-reconciler-2")
	s.Eventually(15*time.Second, "three executors registered", func() bool { return s.AliveWorkers() >= 3 })
	c2 := s.NewClient(api2)
	r := &replicated{t: t, s: s, clients: []*api.ClientWithResponses{s.Client, c2}, db: openDB(t, s)}

	aborts := r.abortWhileReconcilerDies()
	r.failoverMidWorkload()
	aborts()

	var twice, workers int
	require.NoError(t, r.db.QueryRow(`SELECT count(*) FROM (SELECT task_id FROM attempts WHERE state = $1
		GROUP BY task_id HAVING count(*) > 1) x`, int16(dom.TaskSucceeded)).Scan(&twice))
	require.Zero(t, twice, "no task succeeded twice")
	require.NoError(t, r.db.QueryRow(`SELECT count(DISTINCT worker_id) FROM attempts`).Scan(&workers))
	require.Equal(t, 3, workers, "all three executors ran attempts")
}

// replicated is TestReplication's stack and its two api clients.
type replicated struct {
	t       *testing.T
	s       *Stack
	clients []*api.ClientWithResponses
	db      *sql.DB
}

// create makes run name through api replica i%2.
func (r *replicated) create(i int, name string, spec api.WorkflowSpec) {
	resp, err := r.clients[i%2].CreateRunWithResponse(context.Background(), project, domain, nil,
		api.CreateRunRequest{Name: ptr(name), Spec: &spec})
	require.NoError(r.t, err)
	require.Equal(r.t, http.StatusCreated, resp.StatusCode(), "create %s: %s", name, resp.Body)
}

// leader returns the scheduler process that logged taking the lead, once
// exactly one of them has.
func (r *replicated) leader() string {
	var lead []string
	r.s.Eventually(15*time.Second, "one scheduler leads", func() bool {
		lead = lead[:0]
		for _, name := range []string{"scheduler", "scheduler-2"} {
			if logHas(r.s.Proc(name).Log, leaderMsg) {
				lead = append(lead, name)
			}
		}
		return len(lead) == 1
	})
	return lead[0]
}

func logHas(path, text string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), text)
}

// failoverMidWorkload submits 200 runs over both apis, kill -9s the leading
// scheduler once a fifth of them have ended, and measures lead lost → the
// first attempt placed after it (only the new leader places). Every run must
// then succeed.
func (r *replicated) failoverMidWorkload() {
	t, s := r.t, r.s
	lead := r.leader()
	other := map[string]string{"scheduler": "scheduler-2", "scheduler-2": "scheduler"}[lead]
	spec := api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "a", Plugin: ptr("noop")},
		{Name: "b", Command: ptr(`echo "$CAPSTAN_TASK_INDEX"`), Replicas: ptr(2), DependsOn: &[]string{"a"}},
	}}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < replicatedRuns; i += 4 {
				r.create(i, fmt.Sprintf("rep-%03d", i), spec)
			}
		}()
	}
	wg.Wait()
	ended := func() int {
		var n int
		require.NoError(t, r.db.QueryRow(`SELECT count(*) FROM runs WHERE name LIKE 'rep-%' AND ended_at IS NOT NULL`).Scan(&n))
		return n
	}
	s.Eventually(2*time.Minute, "a fifth of the runs ended", func() bool { return ended() >= replicatedRuns/5 })

	killedAt := time.Now()
	s.Kill(lead)
	before := ended()
	require.Less(t, before, replicatedRuns, "the leader died mid-workload")
	var placed sql.NullTime
	s.Eventually(30*time.Second, "a placement after the leader died", func() bool {
		require.NoError(t, r.db.QueryRow(`SELECT min(created_at) FROM attempts WHERE created_at > $1`, killedAt).Scan(&placed))
		return placed.Valid
	})
	failover := placed.Time.Sub(killedAt)
	t.Logf("scheduler failover: lead lost (kill -9 %s, %d of %d runs ended) → first placement by %s: %s (target ≤ %s)",
		lead, before, replicatedRuns, other, failover.Round(time.Millisecond), failoverTarget)
	require.True(t, logHas(s.Proc(other).Log, leaderMsg), "%s took the lead", other)
	require.LessOrEqual(t, failover, failoverTarget, "the new leader places within the target")

	s.Eventually(3*time.Minute, "every run ended", func() bool { return ended() == replicatedRuns })
	var succeeded int
	require.NoError(t, r.db.QueryRow(`SELECT count(*) FROM runs WHERE name LIKE 'rep-%' AND phase = $1`,
		string(api.PhaseSUCCEEDED)).Scan(&succeeded))
	require.Equal(t, replicatedRuns, succeeded, "every run succeeded")
}

// abortWhileReconcilerDies starts 50 runs of one `sleep 600` task, aborts
// them all over both apis and kill -9s one abort reconciler halfway through
// the abort calls. It returns the check to run later: every abort delivered
// (the survivor takes over those the dead one held once asynq's lease on
// them expires), each exactly once, and every sleep gone.
func (r *replicated) abortWhileReconcilerDies() (check func()) {
	t, s := r.t, r.s
	names := make([]string, replicatedAborts)
	for i := range names {
		names[i] = fmt.Sprintf("abort-%02d", i)
		r.create(i, names[i], api.WorkflowSpec{Steps: []api.Step{{Name: "long", Command: sleeper("long.pid")}}})
	}
	pids := make([]int, len(names))
	for i, name := range names {
		pids[i] = pidIn(t, s, filepath.Join(runDir(s, name), "long.pid"))
	}

	var issued atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(names); i += 10 {
				resp, err := r.clients[i%2].AbortRunWithResponse(context.Background(), project, domain, names[i],
					api.AbortRequest{Reason: ptr("replication test")})
				if err == nil && resp.StatusCode() != http.StatusAccepted {
					err = fmt.Errorf("abort %s: %d %s", names[i], resp.StatusCode(), resp.Body)
				}
				if err != nil {
					errs <- err
				}
				issued.Add(1)
			}
		}()
	}
	s.Eventually(30*time.Second, "half the aborts issued", func() bool { return int(issued.Load()) >= len(names)/2 })
	killedAt := time.Now()
	s.Kill("abort-reconciler")
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	delivered := func() int {
		var n int
		require.NoError(t, r.db.QueryRow(`SELECT count(*) FROM actions WHERE run_name LIKE 'abort-%' AND name = $1
			AND abort_outcome IS NOT NULL AND abort_requested_at IS NULL`, dom.RootActionName).Scan(&n))
		return n
	}
	atKill := delivered()

	return func() {
		s.Eventually(3*time.Minute, "every abort cleared", func() bool { return delivered() == len(names) })
		t.Logf("aborts: %d of %d cleared when abort-reconciler died, the last %s after it", atKill, len(names),
			time.Since(killedAt).Round(time.Second))
		rows, err := r.db.Query(`SELECT a.run_name, a.abort_outcome,
				(SELECT count(*) FROM run_events e WHERE e.project = a.project AND e.domain = a.domain
					AND e.run_name = a.run_name AND e.action_name = a.name AND e.type LIKE 'action.abort_%'
					AND e.type <> 'action.abort_requested')
			FROM actions a WHERE a.run_name LIKE 'abort-%' AND a.name = $1`, dom.RootActionName)
		require.NoError(t, err)
		defer rows.Close()
		var n int
		for rows.Next() {
			var run, outcome string
			var events int
			require.NoError(t, rows.Scan(&run, &outcome, &events))
			require.Equal(t, store.AbortDelivered, outcome, "run %s", run)
			require.Equal(t, 1, events, "run %s: the abort was cleared once (one action.abort_<outcome> event)", run)
			n++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, len(names), n)
		s.Eventually(15*time.Second, "every aborted sleep gone", func() bool { return allGone(pids) })
	}
}
