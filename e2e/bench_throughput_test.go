package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/store/storetest"
)

// BenchmarkThroughput measures how many noop tasks a stack (two executors of
// CAPSTAN_BENCH_SLOTS slots, default 100) completes per second when
// CAPSTAN_BENCH_TASKS (20,000) are submitted as fast as the api takes them
// (CAPSTAN_BENCH_SUBMITTERS concurrent clients, default 16), in two shapes
// on a fresh stack each: runs of 100 replicas, and single-task runs. The
// clock runs from the first submission to the last task's ended_at. After
// each shape, with its stack gone, `pgbench -N` runs for as long on the same
// Postgres; the target is tasks/s ÷ (pgbench tps / 3) ≥ 1.5 for the runs of
// replicas and ≥ 1.0 for single-task runs. A 10 s pgbench
// with 8 clients follows, for context (see pgbenchFigures), and after the
// single-task shape the row floor of its runs (rowFloor).
func BenchmarkThroughput(b *testing.B) {
	total := envInt("CAPSTAN_BENCH_TASKS", 20000)
	shapes := []struct {
		name     string
		replicas int
		target   float64 // the least ratio
	}{{"replicas", 100, 1.5}, {"single", 1, 1.0}}
	figures := map[string]any{}
	met := true
	var lines []string
	var rss []map[string]float64
	for _, sh := range shapes {
		runs := max(total/sh.replicas, 1)
		var f throughputFigures
		b.Run(sh.name, func(b *testing.B) { f = measureThroughput(b, runs, sh.replicas) })
		if f.TasksPerSec == 0 {
			continue // not selected by -bench
		}
		secs := int(math.Ceil(f.Elapsed.Seconds()))
		pg, ok := pgbenchTPS(b, max(secs, 5))
		fig := map[string]any{"runs": runs, "replicas": sh.replicas, "tasks": runs * sh.replicas,
			"elapsed_s": round(f.Elapsed.Seconds(), 3), "submit_s": round(f.Submit.Seconds(), 3),
			"runs_done_s": round(f.RunsDone.Seconds(), 3), "tasks_per_s": round(f.TasksPerSec, 1),
			"pg_xacts_per_task": round(f.XactsPerTask, 1), "cpu": f.CPU, "pgbench_seconds": max(secs, 5),
			"peak_rss_mib": f.PeakRSS}
		rss = append(rss, f.PeakRSS)
		line := fmt.Sprintf("%s: %.0f tasks/s", sh.name, f.TasksPerSec)
		if ok {
			ratio := f.TasksPerSec / (pg.TPS / 3)
			fig["pgbench_tps"], fig["ratio"] = round(pg.TPS, 1), round(ratio, 3)
			fig["pgbench_machine_busy"], fig["pgbench_tps_8_clients_10s"] = round(pg.Busy, 3), round(pg.TPS8, 1)
			fig["target_ratio"] = sh.target
			if sh.replicas == 1 {
				if fl := rowFloor(b); fl != nil {
					fl["ratio"] = round(fl["runs_per_s"].(float64)/(pg.TPS/3), 3)
					fig["row_floor"] = fl
				}
			}
			met = met && ratio >= sh.target
			line += fmt.Sprintf(", pgbench %.0f tps, ratio %.2f", pg.TPS, ratio)
			if fl, ok := fig["row_floor"].(map[string]any); ok {
				line += fmt.Sprintf(" (row floor %.0f runs/s, ratio %.2f)", fl["runs_per_s"], fl["ratio"])
			}
		} else {
			fig["pgbench_tps"], fig["ratio"] = nil, nil
			met = false
			line += ", ratio unmeasured (pgbench not found)"
		}
		figures[sh.name] = fig
		lines = append(lines, line)
	}
	figures["pgbench_clients"] = envInt("CAPSTAN_BENCH_PGBENCH_CLIENTS", 1)
	figures["slots_per_executor"] = envInt("CAPSTAN_BENCH_SLOTS", 100)
	figures["executors"] = 2
	figures["peak_rss_mib"] = maxRSS(rss...) // the larger of the two stacks', per process
	if len(lines) == 0 {
		return
	}
	report(b, "throughput", benchResult{Title: "Throughput (noop tasks)", Result: strings.Join(lines, "; "),
		Target: "tasks/s ÷ (pgbench tps / 3) ≥ 1.5 (replicas), ≥ 1.0 (single)", Met: met, Figures: figures})
}

// throughputFigures is what one shape measured.
type throughputFigures struct {
	// Elapsed runs from the first submission to the last task's ended_at.
	Elapsed time.Duration
	// Submit is how long the api took to accept every run.
	Submit time.Duration
	// RunsDone is when every run was seen SUCCEEDED (polled every 100ms).
	RunsDone    time.Duration
	TasksPerSec float64
	CPU         map[string]any
	// PeakRSS is each service's peak RSS in MiB, read before teardown.
	PeakRSS map[string]float64
	// XactsPerTask is the Postgres transactions (each statement outside one
	// counts as one) the stack's database committed per task.
	XactsPerTask float64
}

// measureThroughput submits runs noop runs of replicas tasks on a fresh
// stack and waits until all their tasks succeeded (at most 15 minutes).
func measureThroughput(b *testing.B, runs, replicas int) throughputFigures {
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	db := r.db
	c := loadClient(b, r.Stack, 64)
	spec := noopSpec(replicas)
	cpu := newCPUMeter(r)
	xacts := pgXacts(b, db)
	profiled := r.Profile(b, fmt.Sprintf("throughput-%d", replicas), envDuration("CAPSTAN_BENCH_PROFILE_TIME", 10*time.Second))
	start := time.Now()
	submit := submitAll(b, c, runs, "tp", spec)
	waitTasks(b, db, runs*replicas, 15*time.Minute)
	var last time.Time
	if err := db.QueryRow(`SELECT max(ended_at) FROM tasks`).Scan(&last); err != nil {
		b.Fatal(err)
	}
	waitRuns(b, db, runs, 5*time.Minute)
	f := throughputFigures{Elapsed: last.Sub(start), Submit: submit, RunsDone: time.Since(start), CPU: cpu.Stop(),
		XactsPerTask: float64(pgXacts(b, db)-xacts) / float64(runs*replicas)}
	profiled()
	f.PeakRSS = r.PeakRSS()
	f.TasksPerSec = float64(runs*replicas) / f.Elapsed.Seconds()
	fmt.Printf("throughput %d×%d: %d tasks in %s (%.0f/s); submitted in %s; runs done at %s; %.1f pg xacts/task; cpu %v\n",
		runs, replicas, runs*replicas, f.Elapsed.Round(time.Millisecond), f.TasksPerSec, submit.Round(time.Millisecond),
		f.RunsDone.Round(time.Millisecond), f.XactsPerTask, f.CPU)
	return f
}

// submitAll creates runs runs of spec, named <prefix>-<i>, as fast as the
// api takes them from CAPSTAN_BENCH_SUBMITTERS (16) concurrent clients, and
// returns how long that took. Any refusal fails tb.
func submitAll(tb testing.TB, c *api.ClientWithResponses, runs int, prefix string, spec api.WorkflowSpec) time.Duration {
	tb.Helper()
	return submitEach(tb, runs, func(i int) error {
		return createRun(context.Background(), c, fmt.Sprintf("%s-%d", prefix, i), spec)
	})
}

// waitRuns waits until n runs SUCCEEDED, at most timeout.
func waitRuns(tb testing.TB, db *sql.DB, n int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var done int
		if err := db.QueryRow(`SELECT count(*) FROM runs WHERE phase = 'SUCCEEDED'`).Scan(&done); err != nil {
			tb.Fatal(err)
		}
		if done >= n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d runs SUCCEEDED after %s", done, n, timeout)
		}
		<-time.After(100 * time.Millisecond) // the polling interval
	}
}

// pgXacts returns the transactions the database has committed or rolled
// back (pg_stat_database, which lags by up to its stats flush: read it
// after a pause of activity for an exact count).
func pgXacts(tb testing.TB, db *sql.DB) int64 {
	tb.Helper()
	var n int64
	if _, err := db.Exec(`SELECT pg_stat_force_next_flush()`); err != nil {
		tb.Fatal(err)
	}
	if err := db.QueryRow(`SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// pgbenchPath finds pgbench on PATH or in Debian's Postgres 15 directory.
func pgbenchPath() (string, bool) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, true
	}
	const debian = "/usr/lib/postgresql/15/bin/pgbench"
	if _, err := os.Stat(debian); err == nil {
		return debian, true
	}
	return "", false
}

// pgbenchFigures is what pgbenchTPS measured.
type pgbenchFigures struct {
	// TPS is `pgbench -N` with CAPSTAN_BENCH_PGBENCH_CLIENTS clients (default
	// 1, pgbench's own) for the shape's duration: the target's reference.
	TPS float64
	// Busy is the machine's busy share meanwhile.
	Busy float64
	// TPS8 is a 10 s run with 8 clients, for context: one client measures a
	// round trip's latency (on this VM, slower when the machine is idle),
	// eight the server's capacity.
	TPS8 float64
}

// pgbenchTPS runs pgbench -N on a scratch database of its own on the
// stack's Postgres server, initialised with `pgbench -i` (scale 1) and
// dropped afterwards: secs seconds with CAPSTAN_BENCH_PGBENCH_CLIENTS
// clients, then 10 s with 8. ok is false when pgbench is not installed.
func pgbenchTPS(tb testing.TB, secs int) (f pgbenchFigures, ok bool) {
	tb.Helper()
	bin, found := pgbenchPath()
	if !found {
		fmt.Println("pgbench not found")
		return f, false
	}
	admin, err := sql.Open("pgx", storetest.AdminURL())
	if err != nil {
		tb.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("capstan_bench_pgbench_%d", os.Getpid())
	if _, err := admin.Exec(`CREATE DATABASE ` + name); err != nil {
		tb.Fatalf("create pgbench database: %v", err)
	}
	defer func() { _, _ = admin.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`) }()
	u, err := url.Parse(storetest.AdminURL())
	if err != nil {
		tb.Fatal(err)
	}
	u.Path = "/" + name
	dsn := u.String()
	if out, err := exec.Command(bin, "-i", "-q", "-s", "1", dsn).CombinedOutput(); err != nil {
		tb.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	busy0, total0 := machineBusy()
	f.TPS = runPgbench(tb, bin, dsn, secs, envInt("CAPSTAN_BENCH_PGBENCH_CLIENTS", 1))
	busy1, total1 := machineBusy()
	f.Busy = (busy1 - busy0) / max(total1-total0, 1)
	f.TPS8 = runPgbench(tb, bin, dsn, 10, 8)
	return f, true
}

// rowFloor measures the row floor of a single-task run
// (storetest.RowFloorScript: what Postgres must write for a run, with no
// read or decision around it) on a fresh migrated database of the same
// server: pgbench runs it for rowFloorSeconds from rowFloorClients clients,
// rowFloorBatch runs a transaction. runs_per_s is what Postgres alone
// records with the whole machine: a stack that writes Capstan's rows in
// transactions of that size, and computes them besides, stays under it;
// ms_per_run is the machine's time a run (busy share × cores ÷ runs/s),
// pgbench's own included. Without pgbench it returns nothing; a failing
// script fails tb.
func rowFloor(tb testing.TB) map[string]any {
	tb.Helper()
	bin, found := pgbenchPath()
	if !found {
		return nil
	}
	script := filepath.Join(tb.TempDir(), "rowfloor.sql")
	if err := os.WriteFile(script, []byte(storetest.RowFloorScript), 0o600); err != nil {
		tb.Fatal(err)
	}
	dsn := storetest.NewURL(tb)
	pgbench := func(limit ...string) ([]byte, error) {
		args := append([]string{"-n", "-M", "prepared", "-f", script, "-D", fmt.Sprintf("k=%d", rowFloorBatch),
			"-c", strconv.Itoa(rowFloorClients), "-j", "2"}, limit...)
		return exec.Command(bin, append(args, dsn)...).CombinedOutput()
	}
	// A first round fills the tables, and ANALYZE gives the measured
	// round's plans (each client prepares its statements anew) the
	// statistics of tables that hold rows: plans made on empty tables scan
	// them, and slow down as they grow.
	if out, err := pgbench("-t", "20"); err != nil {
		tb.Fatalf("pgbench of the row floor: %v\n%s", err, out)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = db.Exec(`ANALYZE`)
	db.Close()
	if err != nil {
		tb.Fatalf("analyze the row floor's database: %v", err)
	}
	busy0, total0 := machineBusy()
	out, err := pgbench("-T", strconv.Itoa(rowFloorSeconds))
	busy1, total1 := machineBusy()
	tps := pgbenchTPSOf(tb, "pgbench of the row floor", out, err)
	busy := (busy1 - busy0) / max(total1-total0, 1)
	runs := tps * rowFloorBatch
	fmt.Printf("row floor: %.0f runs/s (%d a transaction, %d clients), machine %.0f%% busy\n", runs, rowFloorBatch,
		rowFloorClients, 100*busy)
	return map[string]any{"runs_per_s": round(runs, 1), "runs_per_transaction": rowFloorBatch,
		"clients": rowFloorClients, "seconds": rowFloorSeconds, "machine_busy": round(busy, 3),
		"ms_per_run": round(busy*float64(runtime.NumCPU())*1000/runs, 3)}
}

// The row floor's pgbench settings: batches of 10 runs (the single-task
// shape's run starts come 3-5 to a transaction, its placements up to 100),
// 4 clients on the 2 cores so that Postgres is never idle waiting for one.
const (
	rowFloorBatch   = 10
	rowFloorClients = 4
	rowFloorSeconds = 10
)

var pgbenchTPSLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// runPgbench runs `pgbench -N -T secs -c clients` on dsn and returns its tps.
func runPgbench(tb testing.TB, bin, dsn string, secs, clients int) float64 {
	tb.Helper()
	out, err := exec.Command(bin, "-N", "-T", strconv.Itoa(secs), "-c", strconv.Itoa(clients),
		"-j", strconv.Itoa(min(clients, 2)), dsn).CombinedOutput()
	tps := pgbenchTPSOf(tb, "pgbench -N", out, err)
	fmt.Printf("pgbench -N -T %d -c %d: %.0f tps\n", secs, clients, tps)
	return tps
}

// pgbenchTPSOf returns the tps a pgbench run printed in out; a run that
// failed (err) or printed none fails tb, naming it what.
func pgbenchTPSOf(tb testing.TB, what string, out []byte, err error) float64 {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%s: %v\n%s", what, err, out)
	}
	m := pgbenchTPSLine.FindSubmatch(out)
	if m == nil {
		tb.Fatalf("%s: no tps in its output:\n%s", what, out)
	}
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		tb.Fatal(err)
	}
	return tps
}

// BenchmarkDiamond measures how many runs of a four-step diamond DAG (a;
// b and c after a; d after b and c; noop steps of one task each) a stack of
// two executors of CAPSTAN_BENCH_SLOTS slots completes per second when
// CAPSTAN_BENCH_DIAMONDS (1,000) are submitted as fast as the api takes
// them, like BenchmarkThroughput's single-task shape. The clock runs from
// the first submission to the last run's ended_at. Target: ≥ 0.4 × the
// single-task runs/s that BenchmarkThroughput wrote to CAPSTAN_BENCH_OUT in
// the same `make bench` (it is declared after BenchmarkThroughput so that
// it runs after it); without that figure met is false, and the figures say
// why.
func BenchmarkDiamond(b *testing.B) {
	runs := envInt("CAPSTAN_BENCH_DIAMONDS", 1000)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	c := loadClient(b, r.Stack, 64)
	spec := api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "a", Plugin: ptr("noop")},
		{Name: "b", Plugin: ptr("noop"), DependsOn: &[]string{"a"}},
		{Name: "c", Plugin: ptr("noop"), DependsOn: &[]string{"a"}},
		{Name: "d", Plugin: ptr("noop"), DependsOn: &[]string{"b", "c"}}}}
	cpu := newCPUMeter(r)
	xacts := pgXacts(b, r.db)
	profiled := r.Profile(b, "diamond", envDuration("CAPSTAN_BENCH_PROFILE_TIME", 10*time.Second))
	start := time.Now()
	submit := submitAll(b, c, runs, "dia", spec)
	waitTasks(b, r.db, runs*len(spec.Steps), 15*time.Minute)
	waitRuns(b, r.db, runs, 5*time.Minute)
	var last time.Time
	if err := r.db.QueryRow(`SELECT max(ended_at) FROM runs`).Scan(&last); err != nil {
		b.Fatal(err)
	}
	usage := cpu.Stop()
	perRun := float64(pgXacts(b, r.db)-xacts) / float64(runs)
	profiled()
	elapsed := last.Sub(start)
	rate := float64(runs) / elapsed.Seconds()
	b.ReportMetric(rate, "runs/s")
	figures := map[string]any{"runs": runs, "steps": len(spec.Steps), "tasks": runs * len(spec.Steps),
		"elapsed_s": round(elapsed.Seconds(), 3), "submit_s": round(submit.Seconds(), 3),
		"runs_per_s": round(rate, 1), "tasks_per_s": round(rate*float64(len(spec.Steps)), 1),
		"pg_xacts_per_run": round(perRun, 1), "cpu": usage, "peak_rss_mib": r.PeakRSS(),
		"slots_per_executor": envInt("CAPSTAN_BENCH_SLOTS", 100), "executors": 2}
	result := fmt.Sprintf("%.0f runs/s (%.0f tasks/s)", rate, rate*float64(len(spec.Steps)))
	suffix, met := singleTask.ratio(figures, "throughput_single_runs_per_s", rate, 0.4)
	result += suffix
	report(b, "diamond", benchResult{Title: "Diamond DAG runs (4 noop steps)", Result: result,
		Target: "runs/s ≥ 0.4 × single-task runs/s of throughput", Met: met, Figures: figures})
}

// baseline is a figure another scenario of the same make bench measured,
// for a ratio: the summary of Scenario in CAPSTAN_BENCH_OUT, figure Path
// (keys into its figures, e.g. "single", "tasks_per_s"), which Name
// ("single-task runs/s") names in the result; Select is the
// scripts/bench regex that runs that scenario.
type baseline struct {
	Scenario, Select, Name string
	Path                   []string
}

// read returns the baseline's figure, or why there is none.
func (bl baseline) read() (float64, string) {
	dir := os.Getenv("CAPSTAN_BENCH_OUT")
	if dir == "" {
		return 0, "CAPSTAN_BENCH_OUT unset: no " + bl.Scenario + " summary to compare with"
	}
	raw, err := os.ReadFile(filepath.Join(dir, bl.Scenario+".json"))
	if err != nil {
		return 0, bl.Scenario + " did not run in this make bench (scripts/bench " + bl.Select + " selects it)"
	}
	var s struct {
		Figures map[string]any `json:"figures"`
	}
	var v any
	if err := json.Unmarshal(raw, &s); err == nil {
		v = s.Figures
	}
	for _, k := range bl.Path {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	if f, ok := v.(float64); ok && f > 0 {
		return f, ""
	}
	return 0, "the " + bl.Scenario + " summary has no " + strings.Join(bl.Path, ".")
}

// ratio reads rate against bl: it records in figures the baseline (under
// key) and the ratio, or ratio null and ratio_unmeasured with the reason,
// and returns the result's suffix and whether the ratio is at least least.
func (bl baseline) ratio(figures map[string]any, key string, rate, least float64) (suffix string, met bool) {
	base, reason := bl.read()
	if reason != "" {
		figures["ratio"], figures["ratio_unmeasured"] = nil, reason
		return ", ratio unmeasured", false
	}
	r := rate / base
	figures[key], figures["ratio"] = round(base, 1), round(r, 3)
	return fmt.Sprintf(", %.2f × %s (%.0f)", r, bl.Name, base), r >= least
}

// singleTask is throughput's single-task runs/s (= tasks/s).
var singleTask = baseline{Scenario: "throughput", Select: "Throughput", Name: "single-task runs/s",
	Path: []string{"single", "tasks_per_s"}}

// BenchmarkConcurrencyKeys measures how many single-task runs (one noop
// step) a stack of two executors of CAPSTAN_BENCH_SLOTS slots completes
// per second when CAPSTAN_BENCH_KEYED_RUNS (20,000) runs spread over
// CAPSTAN_BENCH_KEYS (1,000) concurrency keys with max_runs 1 are
// submitted as fast as the api takes them: at most one run of a key holds
// its slot at a time, the others wait in its line. The clock runs from the
// first submission to the last run's ended_at. Target: ≥ 0.5 × the
// single-task runs/s of BenchmarkThroughput in the same `make bench`
// (declared after it so that it runs after it); without that figure met
// is false, and the figures say why.
func BenchmarkConcurrencyKeys(b *testing.B) {
	runs, keys := envInt("CAPSTAN_BENCH_KEYED_RUNS", 20000), envInt("CAPSTAN_BENCH_KEYS", 1000)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	c := loadClient(b, r.Stack, 64)
	spec := api.WorkflowSpec{Params: &[]api.Param{{Name: "ENV", Required: ptr(true)}},
		Concurrency: &api.Concurrency{Key: "params.ENV", MaxRuns: 1},
		Steps:       []api.Step{{Name: "noop", Plugin: ptr("noop")}}}
	cpu := newCPUMeter(r)
	profiled := r.Profile(b, "concurrency_keys", envDuration("CAPSTAN_BENCH_PROFILE_TIME", 10*time.Second))
	start := time.Now()
	submit := submitEach(b, runs, func(i int) error {
		name := fmt.Sprintf("key-%d", i)
		resp, err := c.CreateRunWithResponse(context.Background(), project, domain, nil, api.CreateRunRequest{Name: &name,
			Spec: &spec, Params: &api.ParamValues{"ENV": fmt.Sprintf("k%04d", i%keys)}})
		if err == nil && resp.JSON201 == nil {
			err = fmt.Errorf("create %s: %d %s", name, resp.StatusCode(), resp.Body)
		}
		return err
	})
	waitRuns(b, r.db, runs, 15*time.Minute)
	var last time.Time
	var most int
	if err := r.db.QueryRow(`SELECT max(ended_at) FROM runs`).Scan(&last); err != nil {
		b.Fatal(err)
	}
	// Two runs of a key overlap when one took its slot before the other ended.
	if err := r.db.QueryRow(`SELECT count(*) FROM runs a JOIN runs o ON a.concurrency_key = o.concurrency_key
		AND a.name < o.name AND a.admitted_at < o.ended_at AND o.admitted_at < a.ended_at`).Scan(&most); err != nil {
		b.Fatal(err)
	}
	usage := cpu.Stop()
	profiled()
	elapsed := last.Sub(start)
	rate := float64(runs) / elapsed.Seconds()
	b.ReportMetric(rate, "runs/s")
	figures := map[string]any{"runs": runs, "keys": keys, "max_runs": 1, "elapsed_s": round(elapsed.Seconds(), 3),
		"submit_s": round(submit.Seconds(), 3), "runs_per_s": round(rate, 1), "overlapping_pairs": most, "cpu": usage,
		"peak_rss_mib": r.PeakRSS(), "slots_per_executor": envInt("CAPSTAN_BENCH_SLOTS", 100), "executors": 2}
	result := fmt.Sprintf("%.0f runs/s over %d keys, %d overlapping pairs", rate, keys, most)
	suffix, met := singleTask.ratio(figures, "throughput_single_runs_per_s", rate, 0.5)
	result += suffix
	met = met && most == 0
	report(b, "concurrency_keys", benchResult{Title: "Single-task runs over 1,000 concurrency keys, max_runs 1",
		Result: result, Target: "runs/s ≥ 0.5 × single-task runs/s of throughput, no two runs of a key overlapping",
		Met: met, Figures: figures})
}

// submitEach calls create(i) for i in [0, runs) from
// CAPSTAN_BENCH_SUBMITTERS (16) goroutines and returns how long that took.
// Any error fails tb.
func submitEach(tb testing.TB, runs int, create func(i int) error) time.Duration {
	tb.Helper()
	start := time.Now()
	next := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range envInt("CAPSTAN_BENCH_SUBMITTERS", 16) {
		wg.Go(func() {
			for i := range next {
				if err := create(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range runs {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		tb.Fatalf("submit: %v", err)
	default:
	}
	return time.Since(start)
}

// BenchmarkForEach measures how many tasks per second one run's for_each
// step of CAPSTAN_BENCH_FOR_EACH_ITEMS (10,000) noop items completes, on a
// stack of two executors of CAPSTAN_BENCH_SLOTS slots, from the run's
// creation to its last task's ended_at. Target: ≥ 0.8 × the tasks/s of
// BenchmarkThroughput's runs of 100 replicas in the same `make bench`
// (declared after it so that it runs after it); without that figure met
// is false, and the figures say why.
func BenchmarkForEach(b *testing.B) {
	n := envInt("CAPSTAN_BENCH_FOR_EACH_ITEMS", 10000)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	c := loadClient(b, r.Stack, 8)
	items := make([]any, n)
	for i := range items {
		items[i] = fmt.Sprintf("item-%05d", i)
	}
	spec := api.WorkflowSpec{Steps: []api.Step{{Name: "each", Plugin: ptr("noop"),
		ForEach: &api.ForEach{Items: &items}}}}
	cpu := newCPUMeter(r)
	profiled := r.Profile(b, "for_each", envDuration("CAPSTAN_BENCH_PROFILE_TIME", 10*time.Second))
	start := time.Now()
	if err := createRun(context.Background(), c, "fan", spec); err != nil {
		b.Fatal(err)
	}
	waitTasks(b, r.db, n, 15*time.Minute)
	waitRuns(b, r.db, 1, 5*time.Minute)
	var last time.Time
	if err := r.db.QueryRow(`SELECT max(ended_at) FROM tasks`).Scan(&last); err != nil {
		b.Fatal(err)
	}
	usage := cpu.Stop()
	profiled()
	elapsed := last.Sub(start)
	rate := float64(n) / elapsed.Seconds()
	b.ReportMetric(rate, "tasks/s")
	figures := map[string]any{"items": n, "elapsed_s": round(elapsed.Seconds(), 3), "tasks_per_s": round(rate, 1),
		"cpu": usage, "peak_rss_mib": r.PeakRSS(), "slots_per_executor": envInt("CAPSTAN_BENCH_SLOTS", 100),
		"executors": 2}
	result := fmt.Sprintf("%.0f tasks/s over %d items", rate, n)
	replicas := baseline{Scenario: "throughput", Select: "Throughput", Name: "the tasks/s of runs of 100 replicas",
		Path: []string{"replicas", "tasks_per_s"}}
	suffix, met := replicas.ratio(figures, "throughput_replicas_tasks_per_s", rate, 0.8)
	result += suffix
	report(b, "for_each", benchResult{Title: "One run's for_each over 10,000 noop items", Result: result,
		Target: "tasks/s ≥ 0.8 × the tasks/s of throughput's runs of 100 replicas", Met: met, Figures: figures})
}
