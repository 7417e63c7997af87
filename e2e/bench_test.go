package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/hibiken/asynq"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
)

// The benchmarks of this package (`make bench`, scripts/bench) each start
// their own stack of release binaries on a fresh database and a private
// redis-server, run one scenario of a bounded size whatever b.N, print a
// readable line and a JSON one, and, when CAPSTAN_BENCH_OUT names a
// directory, write their summary there as <key>.json (see benchResult).

// benchmarking reports whether this test binary runs benchmarks (-bench set):
// they measure release builds, the tests race builds.
func benchmarking() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

// benchResult is one scenario's summary: its figures, its target and
// whether the figures meet it.
type benchResult struct {
	// Title names the scenario.
	Title string `json:"title"`
	// Result is the headline figures, readable.
	Result string `json:"result"`
	// Target is the goal, readable.
	Target string `json:"target"`
	// Met is true when the figures meet the target (false when unmeasured).
	Met bool `json:"met"`
	// Figures holds every number measured and the settings used.
	Figures map[string]any `json:"figures"`
}

// report prints r and writes it to $CAPSTAN_BENCH_OUT/<key>.json.
func report(tb testing.TB, key string, r benchResult) {
	tb.Helper()
	line, err := json.Marshal(map[string]any{"benchmark": key, "result": r})
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Printf("%s: %s (target %s, met %t)\n%s\n", r.Title, r.Result, r.Target, r.Met, line)
	dir := os.Getenv("CAPSTAN_BENCH_OUT")
	if dir == "" {
		return
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, key+".json"), append(b, '\n'), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// benchEnv is what benchmark stacks set beside the services' own defaults
// (Options.Defaults): the executors' slots, and a drain of 1s so that
// teardown does not wait. CAPSTAN_BENCH_ENV (comma separated K=V) adds any
// service setting, e.g. CAPSTAN_POLL_INTERVAL=50ms, to try a change without
// editing code.
func benchEnv(slots int) []string {
	// The per-token rate limit guards a shared api; a benchmark measures
	// what the api can take, from one token.
	env := []string{fmt.Sprintf("CAPSTAN_EXECUTOR_SLOTS=%d", slots), "CAPSTAN_DRAIN_TIMEOUT=1s",
		"CAPSTAN_API_RATE_LIMIT=1000000"}
	if extra := os.Getenv("CAPSTAN_BENCH_ENV"); extra != "" {
		env = append(env, strings.Split(extra, ",")...)
	}
	return env
}

// rig is a benchmark's stack with its private Redis and, when
// CAPSTAN_BENCH_PPROF names a directory, each service's pprof address.
type rig struct {
	*Stack
	Redis *redisServer
	pprof map[string]string
	db    *sql.DB // for the benchmark's own reads: counts, CPU of backends
	// outside are processes the stack uses but did not start, by name (the
	// test Kubernetes cluster's): cpuMeter measures them too.
	outside map[string]int
}

// benchStack starts a stack of n executors with slots each, on a private
// Redis, with the services' defaults, the scenario's env and benchEnv; with
// CAPSTAN_BENCH_PPROF set, every service serves pprof on a port of its own
// (see rig.Profile).
func benchStack(b *testing.B, executors, slots int, env ...string) *rig {
	b.Helper()
	r := &rig{Redis: startRedis(b), pprof: map[string]string{}}
	o := Options{Executors: executors, Redis: r.Redis.Opt, Env: append(env, benchEnv(slots)...), Defaults: true}
	if os.Getenv("CAPSTAN_BENCH_PPROF") != "" {
		o.ServiceEnv = func(name string) []string {
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
			r.pprof[name] = addr // services start one at a time
			return []string{"CAPSTAN_PPROF_ADDR=" + addr}
		}
	}
	r.Stack = Start(b, bins, o)
	r.db = openDB(b, r.Stack)
	return r
}

// Profile, when CAPSTAN_BENCH_PPROF names a directory, records a CPU
// profile of every service for d in the background, into
// <dir>/<label>-<service>.pprof; the returned func waits for them. Without
// it, it does nothing.
func (r *rig) Profile(tb testing.TB, label string, d time.Duration) (wait func()) {
	dir := os.Getenv("CAPSTAN_BENCH_PPROF")
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	for name, addr := range r.pprof {
		wg.Go(func() {
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, max(int(d.Seconds()), 1))
			req, err := http.NewRequest(http.MethodGet, url, nil)
			if err != nil {
				tb.Logf("profile %s: %v", name, err)
				return
			}
			req.Header.Set("Authorization", "Bearer "+r.Token) // the api's pprof needs an admin
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				tb.Logf("profile %s: %v", name, err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(dir, label+"-"+name+".pprof"))
			if err != nil {
				tb.Logf("profile %s: %v", name, err)
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		})
	}
	return wg.Wait
}

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// envDuration reads a positive duration from the environment, or def.
func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// redisServer is a private redis-server for one benchmark.
type redisServer struct {
	Opt asynq.RedisClientOpt
	Pid int
}

// startRedis starts a redis-server on a free loopback port, with no
// persistence, and stops it when tb ends. The benchmarks share no Redis
// database with tests running beside them this way (e2e takes 1-13 of the
// dev Redis, the api's tests 14 and the scheduler's 15), and the server's
// CPU is the benchmark's own.
func startRedis(tb testing.TB) *redisServer {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not found (scripts/dev-deps.sh start installs it): %v", err)
	}
	dir := tb.TempDir()
	port := freePort(tb)
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir, "--save", "",
		"--appendonly", "no", "--protected-mode", "no", "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for rc.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			tb.Fatalf("redis-server on %s did not answer", addr)
		}
		<-time.After(20 * time.Millisecond) // the polling interval
	}
	return &redisServer{Opt: asynq.RedisClientOpt{Addr: addr}, Pid: cmd.Process.Pid}
}

// openDB opens the stack's database for the benchmark's own queries.
func openDB(tb testing.TB, s *Stack) *sql.DB {
	tb.Helper()
	db, err := sql.Open("pgx", s.DBURL)
	if err != nil {
		tb.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	tb.Cleanup(func() { db.Close() })
	return db
}

// loadClient is an api client whose connection pool holds conns idle
// connections, so that a load generator reuses them instead of dialing
// (http.DefaultClient keeps 2 per host).
func loadClient(tb testing.TB, s *Stack, conns int) *api.ClientWithResponses {
	tb.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = conns, conns
	c := s.NewClient(s.APIURL, api.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}))
	tb.Cleanup(tr.CloseIdleConnections)
	return c
}

// createRun submits a run and returns its name. Errors: the api's answer
// when it is not 201.
func createRun(ctx context.Context, c *api.ClientWithResponses, name string, spec api.WorkflowSpec) error {
	resp, err := c.CreateRunWithResponse(ctx, project, domain, nil, api.CreateRunRequest{Name: &name, Spec: &spec})
	if err != nil {
		return err
	}
	if resp.JSON201 == nil {
		return fmt.Errorf("create %s: %d %s", name, resp.StatusCode(), resp.Body)
	}
	return nil
}

// noopSpec is one noop step of replicas tasks.
func noopSpec(replicas int) api.WorkflowSpec {
	return api.WorkflowSpec{Steps: []api.Step{{Name: "noop", Plugin: ptr("noop"), Replicas: ptr(replicas)}}}
}

// taskCounts counts the stack's tasks SUCCEEDED and ended otherwise.
func taskCounts(ctx context.Context, db *sql.DB) (succeeded, failed int, err error) {
	err = db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE state = 4),
		count(*) FILTER (WHERE state IN (5, 6, 7, 8, 10)) FROM tasks`).Scan(&succeeded, &failed)
	return succeeded, failed, err
}

// waitTasks waits until n tasks SUCCEEDED, at most timeout; any task ending
// otherwise, or the timeout, fails tb.
func waitTasks(tb testing.TB, db *sql.DB, n int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, failed, err := taskCounts(context.Background(), db)
		switch {
		case err != nil:
			tb.Fatalf("count tasks: %v", err)
		case failed > 0:
			tb.Fatalf("%d tasks ended other than SUCCEEDED", failed)
		case ok >= n:
			return
		case time.Now().After(deadline):
			tb.Fatalf("%d of %d tasks SUCCEEDED after %s", ok, n, timeout)
		}
		// Each poll counts every task (a scan of the table, ~5 ms at 8,000
		// under load): rarer polls keep the harness's load off the stack it
		// measures; no figure depends on them (ended_at is read from the rows).
		<-time.After(500 * time.Millisecond)
	}
}

// cpuClock is the kernel's USER_HZ, the unit of /proc/<pid>/stat times: 100
// on every Linux architecture Go supports.
const cpuClock = 100

// cpuSeconds returns the user+system CPU time pid has used, in seconds, or
// 0 when it is gone.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / cpuClock
}

// machineBusy returns the machine's busy and total CPU time from /proc/stat,
// in USER_HZ ticks.
func machineBusy() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// cpuMeter measures the CPU the stack's services, its Redis and the whole
// machine use over a phase.
type cpuMeter struct {
	r          *rig
	start      time.Time
	procs      map[string]float64
	busy, tick float64
}

func newCPUMeter(r *rig) *cpuMeter {
	m := &cpuMeter{r: r, start: time.Now(), procs: procCPU(r)}
	m.busy, m.tick = machineBusy()
	return m
}

// procCPU returns the CPU seconds each service, the Redis, this benchmark
// process (the load generator: "harness"), the Postgres backends serving
// the stack's database ("postgres:<pid>") and the rig's outside processes
// have used.
func procCPU(r *rig) map[string]float64 {
	out := map[string]float64{"redis": cpuSeconds(r.Redis.Pid), "harness": cpuSeconds(os.Getpid())}
	for name, pid := range r.outside {
		out[name] = cpuSeconds(pid)
	}
	for _, pid := range r.backends() {
		out["postgres:"+strconv.Itoa(pid)] = cpuSeconds(pid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, p := range r.procs {
		out[name] = cpuSeconds(p.Cmd.Process.Pid)
	}
	return out
}

// backends lists the pids of the Postgres backends connected to the stack's
// database (its services' pools; they live as long as their connections).
func (r *rig) backends() []int {
	var pids []int
	rows, err := r.db.Query(`SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Stop returns each process's CPU use over the phase as a share of one core
// (1.0 = one core busy), the Postgres backends' summed ("postgres": a backend
// that ended during the phase is missed), the machine's busy share of all
// its cores, and the cores busy with anything else ("other_cores": other
// people's work on a shared machine, Postgres's own background processes).
func (m *cpuMeter) Stop() map[string]any {
	wall := time.Since(m.start).Seconds()
	out := map[string]any{}
	var pg, ours float64
	for name, v := range procCPU(m.r) {
		used := max(v-m.procs[name], 0) / wall // a backend born since counts from 0
		ours += used
		if strings.HasPrefix(name, "postgres:") {
			pg += used
			continue
		}
		out[name] = round(used, 3)
	}
	out["postgres"] = round(pg, 3)
	busy, total := machineBusy()
	if total > m.tick {
		share := (busy - m.busy) / (total - m.tick)
		out["machine_busy"] = round(share, 3)
		out["other_cores"] = round(max(share*float64(runtime.NumCPU())-ours, 0), 2)
	}
	return out
}

// cpuMsPerTask is the CPU the stack (its services, Redis and Postgres
// backends: not the harness, not other_cores) took per task, in ms, from
// Stop's shares over wall.
func cpuMsPerTask(usage map[string]any, wall time.Duration, tasks int) float64 {
	var cores float64
	for name, v := range usage {
		if f, ok := v.(float64); ok && name != "harness" && name != "machine_busy" && name != "other_cores" {
			cores += f
		}
	}
	return cores * wall.Seconds() * 1000 / float64(max(tasks, 1))
}

// round rounds v to digits decimals.
func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// ms renders d in milliseconds with a precision fit for a table.
func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 2) }

// groupGone reports whether no process of process group pgid is left.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}
