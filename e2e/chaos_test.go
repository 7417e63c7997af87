package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
)

// chaosKind is one kind of run in the chaos workload and the phase it must
// end in whatever happens to the services.
type chaosKind struct {
	name string
	want api.Phase
	spec api.WorkflowSpec
}

var chaosKinds = []chaosKind{
	{"ok", api.PhaseSUCCEEDED, api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "a", Command: ptr("echo a")},
		{Name: "b", Command: ptr("echo b"), Replicas: ptr(2), DependsOn: &[]string{"a"}},
	}}},
	{"retried", api.PhaseSUCCEEDED, api.WorkflowSpec{Steps: []api.Step{{Name: "flaky", Replicas: ptr(2), MaxRetriesFailure: ptr(3),
		Command: ptr(`f="$CAPSTAN_RUN_DIR/tried-$CAPSTAN_TASK_INDEX"; if [ ! -e "$f" ]; then touch "$f"; exit 3; fi`)}}}},
	{"fails", api.PhaseFAILED, api.WorkflowSpec{Steps: []api.Step{{Name: "bad", Command: ptr("exit 4")}, {Name: "never", Command: ptr("true")}}}},
	{"aborted", api.PhaseABORTED, api.WorkflowSpec{Steps: []api.Step{{Name: "long", Command: sleeper("long.pid")}}}},
}

// TestChaos runs a mixed workload while a driver, in turn, kill -9s and
// restarts each service, wipes Redis and drops every Postgres connection;
// then every run must end in its kind's phase, no run is lost or duplicated,
// no task succeeded twice, and no aborted run left a process. The run count
// is CAPSTAN_CHAOS_RUNS (default 24; `make chaos` runs 1000).
func TestChaos(t *testing.T) {
	n := 24
	if v, err := strconv.Atoi(os.Getenv("CAPSTAN_CHAOS_RUNS")); err == nil && v > 0 {
		n = v
	}
	s := Start(t, bins, Options{Env: []string{"CAPSTAN_EXECUTOR_SLOTS=8"}})
	c := &chaos{t: t, s: s, kinds: map[string]chaosKind{}}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.drive(ctx) }()

	var aborts sync.WaitGroup
	for i := range n {
		k := chaosKinds[i%len(chaosKinds)]
		name := fmt.Sprintf("chaos-%04d-%s", i, k.name)
		c.submit(name, k)
		if k.name == "aborted" {
			aborts.Add(1)
			go func() { defer aborts.Done(); c.abort(name) }()
		}
	}
	aborts.Wait()
	s.Eventually(time.Minute, "one whole cycle of faults", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.faults) >= len(c.faultCycle())
	})
	stop()
	wg.Wait()
	t.Logf("faults injected: %v", c.faults)

	// Recovery gets 3 minutes; the workload itself (about 2.25 attempts a
	// run on the stack's 16 slots of race-built shims) half a second a run.
	deadline := time.Now().Add(3*time.Minute + time.Duration(n)*500*time.Millisecond)
	pending := map[string]bool{}
	for name := range c.kinds {
		pending[name] = true
	}
	phases := map[api.Phase]int{}
	for len(pending) > 0 {
		require.True(t, time.Now().Before(deadline), "runs still not terminal: %v", keys(pending))
		for name := range pending {
			run := c.get(name)
			if run == nil || run.EndedAt == nil {
				continue
			}
			require.Equal(t, c.kinds[name].want, run.Phase, "run %s", name)
			phases[run.Phase]++
			delete(pending, name)
		}
		<-time.After(200 * time.Millisecond)
	}
	t.Logf("runs: %d submitted, phases %v", len(c.kinds), phases)
	c.checkDatabase(n)
	c.checkNoProcessLeft()
}

type chaos struct {
	t      *testing.T
	s      *Stack
	mu     sync.Mutex
	kinds  map[string]chaosKind
	faults []string
}

// submit creates a run, retrying through outages with the same name and
// Idempotency-Key: a retried create must never make a second run.
func (c *chaos) submit(name string, k chaosKind) { c.submitWith(name, k, nil) }

// submitWith is submit with the run's params.
func (c *chaos) submitWith(name string, k chaosKind, params *api.ParamValues) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := c.s.Client.CreateRunWithResponse(context.Background(), project, domain,
			&api.CreateRunParams{IdempotencyKey: ptr(name)}, api.CreateRunRequest{Name: ptr(name), Spec: &k.spec, Params: params})
		if err == nil && (resp.StatusCode() == http.StatusCreated || resp.StatusCode() == http.StatusOK) {
			c.mu.Lock()
			c.kinds[name] = k
			c.mu.Unlock()
			return
		}
		if err == nil && resp.StatusCode() < 500 {
			c.t.Fatalf("create %s: %d %s", name, resp.StatusCode(), resp.Body)
		}
		<-time.After(100 * time.Millisecond)
	}
	c.t.Fatalf("create %s: the api did not come back within a minute", name)
}

// abort waits until the run's sleep started (or a short while), then aborts
// it, retrying through outages; 409 means an earlier try landed.
func (c *chaos) abort(name string) {
	c.t.Helper()
	pidFile := filepath.Join(runDir(c.s, name), "long.pid")
	started := time.Now()
	for time.Since(started) < 3*time.Second {
		if _, err := os.Stat(pidFile); err == nil {
			break
		}
		<-time.After(50 * time.Millisecond)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := c.s.Client.AbortRunWithResponse(context.Background(), project, domain, name, api.AbortRequest{Reason: ptr("chaos")})
		if err == nil && (resp.StatusCode() == http.StatusAccepted || resp.StatusCode() == http.StatusConflict) {
			return
		}
		if err == nil && resp.StatusCode() < 500 {
			c.t.Fatalf("abort %s: %d %s", name, resp.StatusCode(), resp.Body)
		}
		<-time.After(100 * time.Millisecond)
	}
	c.t.Fatalf("abort %s: the api did not come back within a minute", name)
}

func (c *chaos) get(name string) *api.Run {
	resp, err := c.s.Client.GetRunWithResponse(context.Background(), project, domain, name)
	if err != nil || resp.JSON200 == nil {
		return nil
	}
	return resp.JSON200
}

// drive injects one fault every interval until ctx ends: kill -9 and restart
// each service in turn, wipe Redis, drop Postgres's connections (or, with
// CAPSTAN_CHAOS_PG_RESTART=1, restart Postgres itself).
func (c *chaos) drive(ctx context.Context) {
	faults := c.faultCycle()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(700 * time.Millisecond):
		}
		what := faults[i%len(faults)]()
		c.mu.Lock()
		c.faults = append(c.faults, what)
		c.mu.Unlock()
	}
}

func (c *chaos) faultCycle() []func() string {
	return []func() string{
		func() string { c.s.Kill("scheduler"); c.s.StartService("scheduler"); return "kill -9 scheduler" },
		func() string { c.s.Kill("api"); c.s.StartService("api"); return "kill -9 api" },
		func() string { c.s.FlushRedis(); return "FLUSHDB redis" },
		func() string {
			c.s.Kill("abort-reconciler")
			c.s.StartService("abort-reconciler")
			return "kill -9 abort-reconciler"
		},
		func() string { c.s.Kill("executor-1"); c.s.StartExecutor(1); return "kill -9 executor-1" },
		c.postgresFault,
	}
}

// postgresFault drops every connection of the stack's database, as a
// Postgres restart does to its clients; with CAPSTAN_CHAOS_PG_RESTART=1 (make
// chaos, which runs alone) it restarts the server itself.
func (c *chaos) postgresFault() string {
	if os.Getenv("CAPSTAN_CHAOS_PG_RESTART") == "1" {
		root, err := RepoRoot()
		require.NoError(c.t, err)
		out, err := exec.Command(filepath.Join(root, "scripts", "dev-deps.sh"), "restart-postgres").CombinedOutput()
		require.NoError(c.t, err, "%s", out)
		return "restart postgres"
	}
	c.dropConnections()
	return "drop postgres connections"
}

// dropConnections terminates every session on the stack's database, as a
// Postgres restart does to its clients.
func (c *chaos) dropConnections() {
	db := c.sql()
	defer db.Close()
	_, err := db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	require.NoError(c.t, err)
}

func (c *chaos) sql() *sql.DB {
	db, err := sql.Open("pgx", c.s.DBURL)
	require.NoError(c.t, err)
	return db
}

// checkDatabase compares what was submitted with what Postgres holds.
func (c *chaos) checkDatabase(n int) {
	db := c.sql()
	defer db.Close()
	var runs, roots, twice int
	require.NoError(c.t, db.QueryRow(`SELECT count(*) FROM runs`).Scan(&runs))
	require.Equal(c.t, n, runs, "no run lost or duplicated")
	require.NoError(c.t, db.QueryRow(`SELECT count(*) FROM actions WHERE name = 'a0'`).Scan(&roots))
	require.Equal(c.t, n, roots)
	require.NoError(c.t, db.QueryRow(`SELECT count(*) FROM (SELECT task_id FROM attempts WHERE state = 4
		GROUP BY task_id HAVING count(*) > 1) x`).Scan(&twice))
	require.Zero(c.t, twice, "no task succeeded twice")
	// Actions, tasks and attempts have no foreign keys (Postgres's checks
	// were a tenth of a run's cost): what they guarded is checked here.
	for what, q := range map[string]string{
		"no action without its run": `SELECT count(*) FROM actions a WHERE NOT EXISTS (SELECT 1 FROM runs r
			WHERE r.project = a.project AND r.domain = a.domain AND r.name = a.run_name)`,
		"no task without its action": `SELECT count(*) FROM tasks t WHERE NOT EXISTS (SELECT 1 FROM actions a
			WHERE a.project = t.project AND a.domain = t.domain AND a.run_name = t.run_name AND a.name = t.action_name)`,
		"no attempt without its task": `SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM tasks t
			WHERE t.id = a.task_id)`,
	} {
		var orphans int
		require.NoError(c.t, db.QueryRow(q).Scan(&orphans), what)
		require.Zero(c.t, orphans, what)
	}
	var live int
	require.NoError(c.t, db.QueryRow(`SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id
		JOIN runs r ON r.project = t.project AND r.domain = t.domain AND r.name = t.run_name
		WHERE r.ended_at IS NOT NULL AND a.state IN (2, 3)`).Scan(&live))
	c.t.Logf("database: %d runs, %d roots, %d attempts still live in ended runs", runs, roots, live)
}

// checkNoProcessLeft: every sleep an aborted run started is gone.
func (c *chaos) checkNoProcessLeft() {
	var pids []int
	for name, k := range c.kinds {
		if k.name != "aborted" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(runDir(c.s, name), "long.pid"))
		if err != nil {
			continue // aborted before it started
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pids = append(pids, pid)
		}
	}
	c.s.Eventually(15*time.Second, "every aborted run's process gone", func() bool { return allGone(pids) })
	c.t.Logf("aborted runs' processes checked: %d, all gone", len(pids))
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
