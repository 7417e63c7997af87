package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkDispatchLatency offers single-task noop runs at a steady
// CAPSTAN_BENCH_RATE per second (200) for CAPSTAN_BENCH_DURATION (30s) to a
// stack of two executors and measures each task's PENDING → RUNNING time
// from the rows in Postgres: tasks.created_at (the scheduler's clock when it
// inserts the task, in the transaction that starts the step: the figure
// includes the rest of that transaction) to the first attempt's started_at
// (the api's clock when it records the RUNNING report, before its commit).
// Both are this host's clock. It splits the time at the attempt's created_at
// (the scheduler's clock when the pass binds the task). Tasks created in the
// first CAPSTAN_BENCH_WARMUP (2s) are not counted. Beforehand it records what
// the idle stack's processes and Redis use in 5 s (the services' queue
// polls and the executors' blocking pops on their wake lists). Target p99
// ≤ 25 ms.
// CAPSTAN_BENCH_DISPATCH_REPLICAS (1) offers the same tasks as runs of that
// many replicas, at rate/replicas runs per second.
func BenchmarkDispatchLatency(b *testing.B) {
	rate := envInt("CAPSTAN_BENCH_RATE", 200)
	replicas := max(envInt("CAPSTAN_BENCH_DISPATCH_REPLICAS", 1), 1)
	dur := envDuration("CAPSTAN_BENCH_DURATION", 30*time.Second)
	warmup := envDuration("CAPSTAN_BENCH_WARMUP", 2*time.Second)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	db := r.db
	c := loadClient(b, r.Stack, 64)

	idle := newCPUMeter(r) // what the idle stack costs: mostly its queue polling
	<-time.After(5 * time.Second)
	idleUsage := idle.Stop()
	cpu := newCPUMeter(r)
	xacts := pgXacts(b, db)
	profiled := r.Profile(b, "dispatch", dur)
	start := time.Now()
	runs, late := offer(b, max(rate/replicas, 1), dur, func(ctx context.Context, i int, _ time.Time) error {
		return createRun(ctx, c, fmt.Sprintf("dl-%d", i), noopSpec(replicas))
	})
	n := runs * replicas
	offered := time.Since(start)
	usage := cpu.Stop()
	profiled()
	waitTasks(b, db, n, 2*time.Minute)
	waitRuns(b, db, runs, time.Minute)
	xactsPerTask := float64(pgXacts(b, db)-xacts) / float64(n)

	rows, err := db.Query(`SELECT extract(epoch FROM a.created_at - t.created_at),
			extract(epoch FROM a.started_at - a.created_at), extract(epoch FROM a.started_at - t.created_at)
		FROM tasks t JOIN attempts a ON a.task_id = t.id AND a.number = 1 WHERE t.created_at >= $1`,
		start.Add(warmup))
	if err != nil {
		b.Fatal(err)
	}
	var toAssigned, toRunning, total []time.Duration
	for rows.Next() {
		var x, y, z float64
		if err := rows.Scan(&x, &y, &z); err != nil {
			b.Fatal(err)
		}
		toAssigned = append(toAssigned, secs(x))
		toRunning = append(toRunning, secs(y))
		total = append(total, secs(z))
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if len(total) == 0 {
		b.Fatal("no task counted")
	}
	for _, d := range [][]time.Duration{toAssigned, toRunning, total} {
		slices.Sort(d)
	}
	p50, p99 := percentile(total, 50), percentile(total, 99)
	b.ReportMetric(ms(p99), "p99-ms")
	report(b, "dispatch_latency", benchResult{Title: "Dispatch latency (PENDING → RUNNING)",
		Result: fmt.Sprintf("p50 %.1f ms, p99 %.1f ms at %.0f tasks/s offered%s", ms(p50), ms(p99), float64(n)/offered.Seconds(),
			map[bool]string{true: fmt.Sprintf(" as runs of %d replicas", replicas)}[replicas > 1]),
		Target: "p99 ≤ 25 ms", Met: p99 <= 25*time.Millisecond,
		Figures: map[string]any{"rate_per_s": rate, "replicas": replicas, "duration_s": dur.Seconds(), "offered": n,
			"offered_per_s": round(float64(n)/offered.Seconds(), 1), "submitted_late": late, "counted": len(total),
			"p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(total[len(total)-1]),
			"pending_to_assigned_p50_ms": ms(percentile(toAssigned, 50)), "pending_to_assigned_p99_ms": ms(percentile(toAssigned, 99)),
			"assigned_to_running_p50_ms": ms(percentile(toRunning, 50)), "assigned_to_running_p99_ms": ms(percentile(toRunning, 99)),
			"pg_xacts_per_task": round(xactsPerTask, 1), "cpu_ms_per_task": round(cpuMsPerTask(usage, offered, n), 2),
			"cpu": usage, "idle_cpu": idleUsage, "peak_rss_mib": r.PeakRSS(), "edges": "tasks.created_at (scheduler clock at the task's insert) → attempts.started_at (api clock at the RUNNING report)"}})
}

// secs converts seconds to a Duration.
func secs(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }

// offer calls do(ctx, i, due) for i = 0, 1, ... at a steady rate per second
// for dur, open loop: call i is due at start + i/rate whatever the earlier
// ones took, run by up to 64 goroutines. It returns how many calls it made and
// how many started over 10 ms late (the load generator fell behind). Any
// error fails tb.
func offer(tb testing.TB, rate int, dur time.Duration, do func(ctx context.Context, i int, due time.Time) error) (n, late int) {
	tb.Helper()
	total := int(dur.Seconds() * float64(rate))
	due := make(chan int, total)
	var failed atomic.Pointer[error]
	var lateCount atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	at := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second / time.Duration(rate)) }
	for range 64 {
		wg.Go(func() {
			for i := range due {
				if time.Since(at(i)) > 10*time.Millisecond {
					lateCount.Add(1)
				}
				if err := do(context.Background(), i, at(i)); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for i := range total {
		if d := time.Until(at(i)); d > 0 {
			<-time.After(d) // the pace: call i is due at at(i)
		}
		due <- i
	}
	close(due)
	wg.Wait()
	if err := failed.Load(); err != nil {
		tb.Fatalf("offered call failed: %v", *err)
	}
	return total, int(lateCount.Load())
}
