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

// BenchmarkSubWorkflows measures how many parent runs a stack of two
// executors completes per second when CAPSTAN_BENCH_PARENTS (100) runs
// are submitted at once, each of one workflow step whose child runs the
// 4-step noop diamond of BenchmarkDiamond as a template. The clock runs
// from the first submission to the last parent's ended_at. Target: ≥ 0.3 ×
// the runs/s of BenchmarkDiamond in the same `make bench` (declared after
// it, in a later file, so that it runs after it); without that figure met
// is false, and the figures say why.
func BenchmarkSubWorkflows(b *testing.B) {
	runs := envInt("CAPSTAN_BENCH_PARENTS", 100)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	c := loadClient(b, r.Stack, 64)
	diamond := api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "a", Plugin: ptr("noop")},
		{Name: "b", Plugin: ptr("noop"), DependsOn: &[]string{"a"}},
		{Name: "c", Plugin: ptr("noop"), DependsOn: &[]string{"a"}},
		{Name: "d", Plugin: ptr("noop"), DependsOn: &[]string{"b", "c"}}}}
	pushTemplate(b, r.Stack, "diamond", diamond)
	spec := api.WorkflowSpec{Steps: []api.Step{{Name: "child", Kind: ptr("workflow"), Workflow: &api.WorkflowRef{Name: "diamond"}}}}
	cpu := newCPUMeter(r)
	start := time.Now()
	submit := submitAll(b, c, runs, "par", spec)
	waitRuns(b, r.db, 2*runs, 10*time.Minute) // the parents and their children
	var last time.Time
	if err := r.db.QueryRow(`SELECT max(ended_at) FROM runs WHERE parent_run IS NULL`).Scan(&last); err != nil {
		b.Fatal(err)
	}
	usage := cpu.Stop()
	elapsed := last.Sub(start)
	rate := float64(runs) / elapsed.Seconds()
	b.ReportMetric(rate, "runs/s")
	figures := map[string]any{"parents": runs, "child_steps": len(diamond.Steps), "elapsed_s": round(elapsed.Seconds(), 3),
		"submit_s": round(submit.Seconds(), 3), "runs_per_s": round(rate, 2), "cpu": usage, "peak_rss_mib": r.PeakRSS()}
	result := fmt.Sprintf("%.1f parent runs/s", rate)
	base := baseline{Scenario: "diamond", Select: "Diamond", Name: "diamond runs/s", Path: []string{"runs_per_s"}}
	suffix, met := base.ratio(figures, "diamond_runs_per_s", rate, 0.3)
	result += suffix
	report(b, "sub_workflows", benchResult{Title: "Parent runs of a 4-step child workflow", Result: result,
		Target: "runs/s ≥ 0.3 × diamond runs/s", Met: met, Figures: figures})
}

// BenchmarkSubWorkflowAbort measures, over CAPSTAN_BENCH_PARENT_ABORTS (20)
// aborts, the time from the api's abort call on a parent run whose 10
// workflow steps each run a child of one `sleep 600` task, all RUNNING,
// until no process of any child's attempt is left (each attempt's process
// group empty): the abort reaches each child through the abort reconciler.
// Parents run one at a time on two executors of 10 slots. Target p99 ≤
// 500 ms.
func BenchmarkSubWorkflowAbort(b *testing.B) {
	total := envInt("CAPSTAN_BENCH_PARENT_ABORTS", 20)
	const children = 10
	r := benchStack(b, 2, children)
	c := loadClient(b, r.Stack, 8)
	pushTemplate(b, r.Stack, "sleeper", api.WorkflowSpec{Steps: []api.Step{{Name: "sleep", Command: ptr("sleep 600")}}})
	spec := api.WorkflowSpec{Mode: ptr(api.DAG)}
	for i := range children {
		spec.Steps = append(spec.Steps, api.Step{Name: fmt.Sprintf("c%d", i), Kind: ptr("workflow"),
			Workflow: &api.WorkflowRef{Name: "sleeper"}})
	}
	cpu := newCPUMeter(r)
	d := make([]time.Duration, 0, total)
	for i := range total {
		name := fmt.Sprintf("pab-%d", i)
		if err := createRun(context.Background(), c, name, spec); err != nil {
			b.Fatal(err)
		}
		d = append(d, abortTree(b, c, r.db, name, children))
	}
	usage := cpu.Stop()
	slices.Sort(d)
	p50, p99 := percentile(d, 50), percentile(d, 99)
	b.ReportMetric(ms(p99), "p99-ms")
	report(b, "sub_workflow_abort", benchResult{Title: "Abort of a parent with 10 running children (API call → every process gone)",
		Result: fmt.Sprintf("p50 %.0f ms, p99 %.0f ms over %d aborts", ms(p50), ms(p99), len(d)),
		Target: "p99 ≤ 500 ms", Met: p99 <= 500*time.Millisecond,
		Figures: map[string]any{"aborts": len(d), "children": children, "p50_ms": ms(p50), "p99_ms": ms(p99),
			"max_ms": ms(d[len(d)-1]), "min_ms": ms(d[0]), "cpu": usage, "peak_rss_mib": r.PeakRSS()}})
}

// abortTree waits until the n children of parent run their task, aborts the
// parent and returns how long until every child's process group is gone
// (at most 10s, else tb fails).
func abortTree(tb testing.TB, c *api.ClientWithResponses, db *sql.DB, parent string, n int) time.Duration {
	tb.Helper()
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s-c%d-0", parent, i)
	}
	pids := runningPids(tb, db, names, time.Minute)
	start := time.Now()
	resp, err := c.AbortRunWithResponse(context.Background(), project, domain, parent, api.AbortRequest{})
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode() != http.StatusAccepted {
		tb.Fatalf("abort %s: %d %s", parent, resp.StatusCode(), resp.Body)
	}
	deadline := start.Add(10 * time.Second)
	for _, pgid := range pids {
		for !groupGone(pgid) {
			if time.Now().After(deadline) {
				tb.Fatalf("abort %s: process group %d still there after 10s", parent, pgid)
			}
			<-time.After(time.Millisecond) // the polling interval
		}
	}
	return time.Since(start)
}
