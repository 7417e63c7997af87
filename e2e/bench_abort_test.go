package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// BenchmarkAbortLatency measures, over CAPSTAN_BENCH_ABORTS (200) aborts,
// the time from the api's abort call on a run whose one `sleep 600` task is
// RUNNING until no process of its attempt is left: the attempt's process
// group (led by its shim, whose pid the RUNNING report recorded) is empty,
// the leader reaped. Runs start 20 at a time on two executors of 10 slots,
// and are aborted one after another, each timed alone. Target p99 ≤ 500 ms.
func BenchmarkAbortLatency(b *testing.B) {
	total := envInt("CAPSTAN_BENCH_ABORTS", 200)
	const batch = 20
	r := benchStack(b, 2, batch/2)
	db := r.db
	c := loadClient(b, r.Stack, 8)
	spec := api.WorkflowSpec{Steps: []api.Step{{Name: "sleep", Command: ptr("sleep 600")}}}
	cpu := newCPUMeter(r)
	d := make([]time.Duration, 0, total)
	for round := 0; len(d) < total; round++ {
		names := make([]string, min(batch, total-len(d)))
		for i := range names {
			names[i] = fmt.Sprintf("ab-%d-%d", round, i)
			if err := createRun(context.Background(), c, names[i], spec); err != nil {
				b.Fatal(err)
			}
		}
		pids := runningPids(b, db, names, time.Minute)
		for _, name := range names {
			d = append(d, abortOne(b, c, name, pids[name]))
		}
	}
	usage := cpu.Stop()
	slices.Sort(d)
	p50, p99 := percentile(d, 50), percentile(d, 99)
	b.ReportMetric(ms(p99), "p99-ms")
	report(b, "abort_latency", benchResult{Title: "Abort latency (API call → process gone)",
		Result: fmt.Sprintf("p50 %.0f ms, p99 %.0f ms over %d aborts", ms(p50), ms(p99), len(d)),
		Target: "p99 ≤ 500 ms", Met: p99 <= 500*time.Millisecond,
		Figures: map[string]any{"aborts": len(d), "p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(d[len(d)-1]),
			"min_ms": ms(d[0]), "cpu": usage, "peak_rss_mib": r.PeakRSS()}})
}

// abortOne aborts run name and returns how long until process group pgid is
// gone (at most 10s, else tb fails).
func abortOne(tb testing.TB, c *api.ClientWithResponses, name string, pgid int) time.Duration {
	tb.Helper()
	start := time.Now()
	resp, err := c.AbortRunWithResponse(context.Background(), project, domain, name, api.AbortRequest{})
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode() != http.StatusAccepted {
		tb.Fatalf("abort %s: %d %s", name, resp.StatusCode(), resp.Body)
	}
	deadline := start.Add(10 * time.Second)
	for !groupGone(pgid) {
		if time.Now().After(deadline) {
			tb.Fatalf("abort %s: process group %d still there after 10s", name, pgid)
		}
		<-time.After(time.Millisecond) // the polling interval
	}
	return time.Since(start)
}

// runningPids waits until the task of each run in names is RUNNING with a
// recorded pid, at most timeout, and returns each run's pid.
func runningPids(tb testing.TB, db *sql.DB, names []string, timeout time.Duration) map[string]int {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pids := map[string]int{}
		rows, err := db.Query(`SELECT t.run_name, a.pid FROM tasks t
			JOIN attempts a ON a.task_id = t.id AND a.number = t.attempt_count
			WHERE t.run_name = ANY($1) AND a.state = 3 AND a.pid IS NOT NULL`, names)
		if err != nil {
			tb.Fatal(err)
		}
		for rows.Next() {
			var name string
			var pid int
			if err := rows.Scan(&name, &pid); err != nil {
				tb.Fatal(err)
			}
			pids[name] = pid
		}
		if err := rows.Close(); err != nil {
			tb.Fatal(err)
		}
		if len(pids) == len(names) {
			return pids
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d tasks RUNNING after %s", len(pids), len(names), timeout)
		}
		<-time.After(20 * time.Millisecond) // the polling interval
	}
}
