package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// BenchmarkFairShare floods project fair-a with CAPSTAN_BENCH_FAIR_TASKS
// (50,000) PENDING noop tasks (runs of 1,000 replicas: short tasks, so
// slots free often) on a stack of two executors of CAPSTAN_BENCH_SLOTS
// (100) slots, then, CAPSTAN_BENCH_TRIALS (5) times one after the other,
// project fair-b submits 10 single-task noop runs in one batch request and
// the benchmark reads the time from the submission (the harness's clock
// before the request) to b's first task RUNNING (its first attempt's
// started_at, the api's clock on this host). Each trial waits for b's 10
// runs to end, and records how many of a's tasks were PENDING when it
// submitted: a trial counts only while a's backlog waits. The workload ends
// after the trials (a's rest dies with the stack). Target: p99 ≤ 200 ms
// over the trials, a's backlog pending at every one.
func BenchmarkFairShare(b *testing.B) {
	tasks := envInt("CAPSTAN_BENCH_FAIR_TASKS", 50000)
	trials := envInt("CAPSTAN_BENCH_TRIALS", 5)
	slots := envInt("CAPSTAN_BENCH_SLOTS", 100)
	r := benchStack(b, 2, slots)
	c := loadClient(b, r.Stack, 8)
	ctx := context.Background()
	flood := noopSpec(1000)
	created := time.Now()
	for i := range (tasks + 999) / 1000 {
		resp, err := c.CreateRunWithResponse(ctx, "fair-a", domain, nil,
			api.CreateRunRequest{Name: ptr(fmt.Sprintf("flood-%d", i)), Spec: &flood})
		if err != nil || resp.JSON201 == nil {
			b.Fatalf("create flood-%d: %v %v", i, err, resp)
		}
	}
	pending := func() int {
		return benchCount(b, r.db, `SELECT count(*) FROM tasks WHERE project = 'fair-a' AND state = 1`)
	}
	r.Eventually(2*time.Minute, "a's tasks inserted", func() bool {
		return benchCount(b, r.db, `SELECT count(*) FROM tasks WHERE project = 'fair-a'`) >= tasks
	})
	floodSeconds := time.Since(created).Seconds()
	metrics := "http://" + r.LoggedAddr("scheduler", "scheduler started", "metrics") + "/metrics"
	before := scrapeSums(b, metrics)
	cpu := newCPUMeter(r)
	var delays []time.Duration
	var backlog []int
	var edges []map[string]float64
	for trial := range trials {
		names := make([]string, 10)
		items := make([]map[string]any, 10)
		for i := range names {
			names[i] = fmt.Sprintf("few-%d-%d", trial, i)
			items[i] = map[string]any{"name": names[i], "spec": noopSpec(1)}
		}
		backlog = append(backlog, pending())
		submitted := time.Now()
		resp, err := c.CreateRunsWithResponse(ctx, "fair-b", domain, api.CreateRunsRequest{Runs: items})
		if err != nil || resp.StatusCode() >= 300 {
			b.Fatalf("create b's runs: %v %v", err, resp)
		}
		var first sql.NullTime
		r.Eventually(time.Minute, "b's first task RUNNING", func() bool {
			err := r.db.QueryRow(`SELECT min(a.started_at) FROM tasks t JOIN attempts a ON a.task_id = t.id
				WHERE t.project = 'fair-b' AND t.run_name = ANY($1)`, names).Scan(&first)
			if err != nil {
				b.Fatal(err)
			}
			return first.Valid
		})
		delays = append(delays, first.Time.Sub(submitted))
		edges = append(edges, firstTaskEdges(b, r.db, names, submitted))
		r.Eventually(time.Minute, "b's runs ended", func() bool {
			return benchCount(b, r.db, `SELECT count(*) FROM runs WHERE project = 'fair-b' AND ended_at IS NOT NULL`) ==
				(trial+1)*10
		})
	}
	usage := cpu.Stop()
	passes := passFigures(before, scrapeSums(b, metrics))
	left := pending()
	sorted := slices.Clone(delays)
	slices.Sort(sorted)
	p50, p99 := percentile(sorted, 50), percentile(sorted, 99)
	perTrial := make([]float64, len(delays))
	for i, d := range delays {
		perTrial[i] = ms(d)
	}
	waited := slices.Min(backlog) > 0
	b.ReportMetric(ms(p99), "p99-ms")
	report(b, "fair_share", benchResult{Title: "Fair share (b's first task RUNNING behind a's backlog)",
		Result: fmt.Sprintf("p50 %.0f ms, p99 %.0f ms over %d trials; a had %d..%d tasks pending at b's submissions (of %d)",
			ms(p50), ms(p99), trials, slices.Min(backlog), slices.Max(backlog), tasks),
		Target: "50,000 pending in project a: b's first task RUNNING p99 ≤ 200 ms over 5 trials",
		Met:    tasks >= 50000 && trials >= 5 && p99 <= 200*time.Millisecond && waited,
		Figures: map[string]any{"a_tasks": tasks, "trials": trials, "b_runs_per_trial": 10, "executors": 2,
			"slots_per_executor": slots, "flood_create_s": round(floodSeconds, 2), "a_pending_at_submit": backlog,
			"a_pending_after": left, "per_trial_ms": perTrial, "first_task_edges_ms": edges, "passes": passes, "p50_ms": ms(p50), "p99_ms": ms(p99),
			"max_ms": ms(sorted[len(sorted)-1]), "cpu": usage, "peak_rss_mib": r.PeakRSS(),
			"edges": "harness clock before b's batch POST → b's first attempt's started_at (api clock)"}})
}

// firstTaskEdges splits the time to the first RUNNING of the tasks of the
// runs names (ms): submitted → the run's created_at (api) → the task's
// created_at (scheduler, its run's start) → its attempt's created_at (the
// bind) → started_at (the RUNNING report).
func firstTaskEdges(tb testing.TB, db *sql.DB, names []string, submitted time.Time) map[string]float64 {
	tb.Helper()
	var run, task, bound, started time.Time
	if err := db.QueryRow(`SELECT r.created_at, t.created_at, a.created_at, a.started_at FROM tasks t
		JOIN attempts a ON a.task_id = t.id JOIN runs r ON (r.project, r.domain, r.name) = (t.project, t.domain, t.run_name)
		WHERE t.project = 'fair-b' AND t.run_name = ANY($1) AND a.started_at IS NOT NULL ORDER BY a.started_at LIMIT 1`,
		names).Scan(&run, &task, &bound, &started); err != nil {
		tb.Fatal(err)
	}
	return map[string]float64{"to_run_created": ms(run.Sub(submitted)), "to_task_created": ms(task.Sub(run)),
		"to_bound": ms(bound.Sub(task)), "to_running": ms(started.Sub(bound))}
}

// scrapeSums reads the _sum and _count of every histogram series of the
// /metrics at url, by series name and labels.
func scrapeSums(tb testing.TB, url string) map[string]float64 {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || !strings.Contains(series, "_sum") && !strings.Contains(series, "_count") {
			continue
		}
		out[series], _ = strconv.ParseFloat(value, 64)
	}
	return out
}

// passFigures is what the scheduler did between two scrapes (scrapeSums):
// its passes' number and mean duration, and the number and mean duration
// of each of its statements (by operation) that took 1% of the time or
// more.
func passFigures(before, after map[string]float64) map[string]any {
	mean := func(sum, count string) map[string]any {
		n := after[count] - before[count]
		if n <= 0 {
			return nil
		}
		return map[string]any{"n": n, "avg_ms": round(1000*(after[sum]-before[sum])/n, 2),
			"total_ms": round(1000*(after[sum]-before[sum]), 1)}
	}
	pass := mean("capstan_scheduler_pass_seconds_sum", "capstan_scheduler_pass_seconds_count")
	out := map[string]any{"pass": pass}
	const prefix = "capstan_db_operation_duration_seconds_sum"
	var all float64
	for series := range after {
		if strings.HasPrefix(series, prefix) {
			all += after[series] - before[series]
		}
	}
	for series := range after {
		if !strings.HasPrefix(series, prefix) || after[series]-before[series] < all/100 {
			continue
		}
		label := strings.TrimPrefix(series, prefix)
		op := strings.TrimSuffix(strings.TrimPrefix(label, `{operation="`), `"}`)
		out[op] = mean(series, "capstan_db_operation_duration_seconds_count"+label)
	}
	return out
}

// benchCount runs a count query on db.
func benchCount(tb testing.TB, db *sql.DB, q string) int {
	tb.Helper()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}
