package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// BenchmarkSchedules creates CAPSTAN_BENCH_SCHEDULES (10,000) schedules of
// a one-step noop template, each firing every minute ("* * * * *", overlap
// skip), through the api, on a stack of one scheduler and two executors of
// 100 slots, and watches CAPSTAN_BENCH_SCHEDULE_MINUTES (5) whole minutes
// of them: the scheduled times from the first whole minute after the last
// schedule was created. For every run of those times it reads created_at
// (the scheduler's clock when the firing inserts it) − scheduled_at, and
// it counts the times that started no run (missed: skipped by the overlap
// policy, missed by the catch-up window, or never fired) and those that
// started more than one (twice). Target: p99 ≤ 1 s, none missed, none
// twice, at 10,000 schedules over 5 minutes.
func BenchmarkSchedules(b *testing.B) {
	n := envInt("CAPSTAN_BENCH_SCHEDULES", 10000)
	minutes := envInt("CAPSTAN_BENCH_SCHEDULE_MINUTES", 5)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	db := r.db
	pushTemplate(b, r.Stack, "tick", noopSpec(1))
	created := time.Now()
	createSchedules(b, loadClient(b, r.Stack, 16), n)
	createSeconds := time.Since(created).Seconds()
	from := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	last := from.Add(time.Duration(minutes-1) * time.Minute)
	r.Eventually(2*time.Minute, "the first minute of the window", func() bool { return !time.Now().Before(from) })
	cpu := newCPUMeter(r)
	profiled := r.Profile(b, "schedules", envDuration("CAPSTAN_BENCH_PROFILE_TIME", 10*time.Second))
	r.Eventually(time.Duration(minutes+1)*time.Minute, "the window's last minute fired", func() bool {
		var oldest time.Time
		return db.QueryRow(`SELECT min(cursor_at) FROM schedules`).Scan(&oldest) == nil && !oldest.Before(last) &&
			time.Since(last) > 30*time.Second // its runs have had the time the next minute gives them
	})
	usage := cpu.Stop()
	profiled()
	statements := firingStatements(b, "http://"+r.LoggedAddr("scheduler", "scheduler started", "metrics"))

	delays, perMinute := scheduleDelays(b, r, from, last)
	var runs, distinct, skipped, missedWindow, succeeded int
	if err := db.QueryRow(`SELECT count(*), count(DISTINCT (schedule_name, scheduled_at)),
			count(*) FILTER (WHERE phase = 'SUCCEEDED') FROM runs WHERE scheduled_at BETWEEN $1 AND $2`, from, last).
		Scan(&runs, &distinct, &succeeded); err != nil {
		b.Fatal(err)
	}
	if err := db.QueryRow(`SELECT coalesce(sum(skipped_overlap), 0), coalesce(sum(missed_catchup_window), 0) FROM schedules`).
		Scan(&skipped, &missedWindow); err != nil {
		b.Fatal(err)
	}
	expected := n * minutes
	missed, twice := expected-distinct, runs-distinct
	p50, p90, p99, worst := percentile(delays, 50), percentile(delays, 90), percentile(delays, 99), delays[len(delays)-1]
	b.ReportMetric(ms(p99), "p99-ms")
	report(b, "schedules", benchResult{Title: "Schedules firing every minute (created_at − scheduled_at)",
		Result: fmt.Sprintf("p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d of %d times started, %d missed, %d twice (%d schedules, %d min)",
			ms(p50), ms(p99), ms(worst), distinct, expected, missed, twice, n, minutes),
		Target: "10,000 schedules of * * * * *: p99 ≤ 1 s, none missed, none twice over 5 minutes",
		Met:    n >= 10000 && minutes >= 5 && p99 <= time.Second && missed == 0 && twice == 0,
		Figures: map[string]any{"schedules": n, "minutes": minutes, "expected_runs": expected, "runs": runs,
			"distinct_times": distinct, "missed": missed, "twice": twice, "skipped_overlap": skipped,
			"missed_catchup_window": missedWindow, "succeeded": succeeded, "create_schedules_s": round(createSeconds, 2),
			"p50_ms": ms(p50), "p90_ms": ms(p90), "p99_ms": ms(p99), "max_ms": ms(worst), "per_minute": perMinute,
			"firing_statements": statements, "executors": 2, "cpu": usage, "peak_rss_mib": r.PeakRSS(),
			"edges": "runs.scheduled_at (the schedule's time) → runs.created_at (scheduler clock at the firing's insert)"}})
}

// createSchedules creates n schedules of the template tick, "s<i>", every
// minute, from 16 concurrent clients.
func createSchedules(tb testing.TB, c *api.ClientWithResponses, n int) {
	tb.Helper()
	next := atomic.Int64{}
	var failed atomic.Pointer[string]
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && failed.Load() == nil; i = int(next.Add(1)) - 1 {
				resp, err := c.CreateScheduleWithResponse(context.Background(), project, domain, api.CreateScheduleRequest{
					Name: fmt.Sprintf("s%05d", i), Workflow: api.WorkflowRef{Name: "tick"}, Cron: ptr("* * * * *")})
				switch {
				case err != nil:
					msg := err.Error()
					failed.CompareAndSwap(nil, &msg)
				case resp.JSON201 == nil:
					msg := fmt.Sprintf("%d %s", resp.StatusCode(), resp.Body)
					failed.CompareAndSwap(nil, &msg)
				}
			}
		})
	}
	wg.Wait()
	if msg := failed.Load(); msg != nil {
		tb.Fatalf("create schedule: %s", *msg)
	}
}

// scheduleDelays returns created_at − scheduled_at of every run scheduled
// in [from, last], sorted, and for each minute its runs, its inserts (the
// distinct created_at: one per firing transaction) and when each began
// after the minute, and its min, p99 and max (ms).
func scheduleDelays(tb testing.TB, r *rig, from, last time.Time) ([]time.Duration, []map[string]any) {
	tb.Helper()
	rows, err := r.db.Query(`SELECT scheduled_at, extract(epoch FROM created_at - scheduled_at), created_at FROM runs
		WHERE scheduled_at BETWEEN $1 AND $2`, from, last)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var all []time.Duration
	byMinute := map[time.Time][]time.Duration{}
	inserts := map[time.Time]map[time.Time]bool{} // a firing transaction's runs share their created_at
	for rows.Next() {
		var at, created time.Time
		var d float64
		if err := rows.Scan(&at, &d, &created); err != nil {
			tb.Fatal(err)
		}
		at = at.UTC()
		all = append(all, secs(d))
		byMinute[at] = append(byMinute[at], secs(d))
		if inserts[at] == nil {
			inserts[at] = map[time.Time]bool{}
		}
		inserts[at][created] = true
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(all) == 0 {
		tb.Fatal("no scheduled run in the window")
	}
	slices.Sort(all)
	var perMinute []map[string]any
	for at := from; !at.After(last); at = at.Add(time.Minute) {
		d := byMinute[at]
		slices.Sort(d)
		var offsets []float64
		for created := range inserts[at] {
			offsets = append(offsets, ms(created.Sub(at)))
		}
		slices.Sort(offsets)
		m := map[string]any{"at": at.Format(time.RFC3339), "runs": len(d), "inserts": len(inserts[at]), "insert_ms": offsets}
		if len(d) > 0 {
			m["min_ms"], m["p99_ms"], m["max_ms"] = ms(d[0]), ms(percentile(d, 99)), ms(d[len(d)-1])
		}
		perMinute = append(perMinute, m)
	}
	return all, perMinute
}

// firingOperations are the store operations of a firing transaction.
var firingOperations = []string{"LockDueSchedules", "LiveScheduledRuns", "TemplateVersions", "CreateRuns",
	"RecordFirings", "NextCheckAt", "flushEvents"}

// firingStatements scrapes the scheduler's /metrics at base for the
// statements of firingOperations: for each, how many ran and their mean
// duration (ms), over the scheduler's life.
func firingStatements(tb testing.TB, base string) map[string]any {
	tb.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	sums, counts := map[string]float64{}, map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		for _, op := range firingOperations {
			label := `{operation="` + op + `"} `
			for suffix, into := range map[string]map[string]float64{"_sum": sums, "_count": counts} {
				if prefix := "capstan_db_operation_duration_seconds" + suffix + label; strings.HasPrefix(line, prefix) {
					into[op], _ = strconv.ParseFloat(strings.TrimPrefix(line, prefix), 64)
				}
			}
		}
	}
	out := map[string]any{}
	for _, op := range firingOperations {
		if n := counts[op]; n > 0 {
			out[op] = map[string]any{"n": n, "avg_ms": round(1000*sums[op]/n, 2)}
		}
	}
	return out
}
