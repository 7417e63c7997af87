package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/store/storetest"
)

// BenchmarkHistory measures what a million finished runs of history cost,
// and what retention gives back, on one stack (two executors; the reaper
// every 100 ms):
//
//  1. On the empty database: single-task throughput (CAPSTAN_BENCH_HISTORY_TASKS
//     runs, 10,000, submitted as BenchmarkThroughput does), dispatch p99
//     (200 runs/s offered for 20 s, as BenchmarkDispatchLatency counts it)
//     and GET run p99 (1,000 req/s for 15 s over 100 of the runs).
//  2. CAPSTAN_BENCH_HISTORY_RUNS (1,000,000) finished single-task runs of
//     history are loaded (storetest.LoadHistory: the rows such a run leaves,
//     ended over the past day, kept), then VACUUM ANALYZE; the three figures
//     again. Targets: throughput ≥ 90 % of the empty figure, each p99 ≤ 1.2×.
//  3. As many runs with ttl after_completion 1m pass through: loaded in waves
//     of CAPSTAN_BENCH_HISTORY_WAVE (60,000, what a minute holds at 1,000
//     runs/s), each already expired, deleted by the reaper while 200 runs/s
//     are offered, and a VACUUM (autovacuum's part) before the next wave.
//     Targets: deletion ≥ 5,000 runs/s (runs deleted ÷ the time from a wave's
//     load, checkpointed, to its last run gone), dispatch p99 of the tasks
//     created while the reaper deletes ≤ 50 ms, and the database after the
//     last wave, the offered runs reaped too, and a VACUUM ≤ 1.2× its size
//     before the waves.
func BenchmarkHistory(b *testing.B) {
	tasks := envInt("CAPSTAN_BENCH_HISTORY_TASKS", 10000)
	history := envInt("CAPSTAN_BENCH_HISTORY_RUNS", 1000000)
	wave := envInt("CAPSTAN_BENCH_HISTORY_WAVE", 60000)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100), "CAPSTAN_RETENTION_INTERVAL=100ms")
	h := &historyBench{rig: r, c: loadClient(b, r.Stack, 64)}
	ctx := context.Background()

	empty := h.measure(b, "he", tasks)
	start := time.Now()
	// The day the history spans has its partitions, as the keeper makes
	// them for the days it sees coming.
	if _, err := r.Store().History().EnsurePartitions(ctx, start.Add(-24*time.Hour), 2); err != nil {
		b.Fatal(err)
	}
	if _, err := storetest.LoadHistory(ctx, h.db, storetest.History{Project: project, Domain: domain, Prefix: "hist-",
		N: history, Start: start.Add(-24 * time.Hour), Every: 24 * time.Hour / time.Duration(history),
		Took: 200 * time.Millisecond}); err != nil {
		b.Fatal(err)
	}
	loaded := time.Since(start)
	h.exec(b, `VACUUM ANALYZE`)
	h.exec(b, `CHECKPOINT`) // the load's pages written now, not while the next phase measures
	fmt.Printf("history: %d runs loaded in %s, vacuumed in %s\n", history, loaded.Round(time.Second),
		(time.Since(start) - loaded).Round(time.Second))
	full := h.measure(b, "hf", tasks)
	before := h.size(b)
	reap := h.waves(b, history, wave)
	// The runs offered meanwhile go too: what stays is what passing the
	// expiring runs through left.
	if _, err := h.db.Exec(`UPDATE runs SET expires_at = now() WHERE project = $1 AND domain = $2 AND name = ANY($3)`,
		project, domain, reap.offered); err != nil {
		b.Fatal(err)
	}
	h.waitReaped(b)
	h.exec(b, `VACUUM`)
	after := h.size(b)

	tp := full.tasksPerSec / empty.tasksPerSec
	getRatio, dispatchRatio := ratio(full.get, empty.get), ratio(full.dispatch, empty.dispatch)
	rate := float64(reap.runs) / reap.busy.Seconds()
	sizeRatio := float64(after) / float64(before)
	targets := map[string]any{
		"throughput_ratio":      map[string]any{"value": round(tp, 3), "target": "≥ 0.90", "met": tp >= 0.9},
		"get_run_p99_ratio":     map[string]any{"value": round(getRatio, 3), "target": "≤ 1.2", "met": getRatio <= 1.2},
		"dispatch_p99_ratio":    map[string]any{"value": round(dispatchRatio, 3), "target": "≤ 1.2", "met": dispatchRatio <= 1.2},
		"reaper_dispatch_p99":   map[string]any{"value": ms(reap.dispatch), "target": "≤ 50 ms", "met": reap.dispatch <= 50*time.Millisecond},
		"reaper_runs_per_s":     map[string]any{"value": round(rate, 0), "target": "≥ 5000", "met": rate >= 5000},
		"size_after_reap_ratio": map[string]any{"value": round(sizeRatio, 3), "target": "≤ 1.2", "met": sizeRatio <= 1.2},
	}
	met := history >= 1000000
	for _, t := range targets {
		met = met && t.(map[string]any)["met"].(bool)
	}
	report(b, "history", benchResult{Title: fmt.Sprintf("History (%d finished runs)", history),
		Result: fmt.Sprintf("throughput %.0f → %.0f tasks/s (%.0f %%); GET run p99 %.1f → %.1f ms; dispatch p99 %.1f → %.1f ms; "+
			"reaper %.0f runs/s, dispatch p99 %.1f ms meanwhile; size %.0f → %.0f MiB after %d runs reaped (×%.2f)",
			empty.tasksPerSec, full.tasksPerSec, 100*tp, ms(empty.get), ms(full.get), ms(empty.dispatch), ms(full.dispatch),
			rate, ms(reap.dispatch), mib(before), mib(after), reap.runs, sizeRatio),
		Target: "with 1,000,000 runs: throughput ≥ 90 %, GET run and dispatch p99 ≤ 1.2×; reaper ≥ 5,000 runs/s with dispatch p99 ≤ 50 ms; size after reap ≤ 1.2×",
		Met:    met,
		Figures: map[string]any{"history_runs": history, "wave_runs": wave, "tasks": tasks, "load_s": round(loaded.Seconds(), 1),
			"targets": targets, "empty": empty.figures(), "full": full.figures(),
			"reaper": map[string]any{"runs": reap.runs, "busy_s": round(reap.busy.Seconds(), 2), "waves": reap.waves,
				"dispatch_p50_ms": ms(reap.dispatchP50), "dispatch_p99_ms": ms(reap.dispatch), "dispatch_counted": reap.counted,
				"wave_rates_per_s": reap.rates},
			"size_mib":     map[string]any{"empty": mib(empty.size), "with_history": mib(before), "after_reap_vacuum": mib(after)},
			"peak_rss_mib": r.PeakRSS()}})
}

// historyBench is BenchmarkHistory's stack and its client.
type historyBench struct {
	*rig
	c *api.ClientWithResponses
}

// historyFigures are one phase's measures.
type historyFigures struct {
	tasksPerSec     float64
	get, dispatch   time.Duration
	getP50, dispP50 time.Duration
	size            int64
}

func (f historyFigures) figures() map[string]any {
	return map[string]any{"tasks_per_s": round(f.tasksPerSec, 1), "get_run_p50_ms": ms(f.getP50), "get_run_p99_ms": ms(f.get),
		"dispatch_p50_ms": ms(f.dispP50), "dispatch_p99_ms": ms(f.dispatch), "size_mib": mib(f.size)}
}

// measure runs phase prefix: the throughput of tasks single-task runs, then
// dispatch latency at 200 runs/s for 20 s, then GET run at 1,000 req/s
// for 15 s.
func (h *historyBench) measure(b *testing.B, prefix string, tasks int) historyFigures {
	var f historyFigures
	names := make([]string, tasks)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	start := time.Now()
	submitAll(b, h.c, tasks, prefix, noopSpec(1))
	h.waitEnded(b, names, 10*time.Minute)
	var last time.Time
	if err := h.db.QueryRow(`SELECT max(ended_at) FROM tasks WHERE project = $1 AND domain = $2 AND run_name = ANY($3)`,
		project, domain, names).Scan(&last); err != nil {
		b.Fatal(err)
	}
	f.tasksPerSec = float64(tasks) / last.Sub(start).Seconds()

	lat := h.dispatchAt(b, prefix+"-d", 200, 20*time.Second)
	f.dispP50, f.dispatch = percentile(lat, 50), percentile(lat, 99)
	f.getP50, f.get = h.getRuns(b, names[:100], 1000, 15*time.Second)
	f.size = h.size(b)
	fmt.Printf("history %s: %.0f tasks/s, dispatch p99 %.1f ms, GET run p99 %.1f ms, %.0f MiB\n", prefix, f.tasksPerSec,
		ms(f.dispatch), ms(f.get), mib(f.size))
	return f
}

// reapFigures are the waves' measures, and the runs offered meanwhile.
type reapFigures struct {
	offered               []string
	runs, waves, counted  int
	busy                  time.Duration
	dispatch, dispatchP50 time.Duration
	rates                 []float64
}

// waves passes n expired runs through the reaper, wave runs at a time,
// while 200 runs/s are offered; see BenchmarkHistory.
func (h *historyBench) waves(b *testing.B, n, wave int) reapFigures {
	ctx := context.Background()
	var f reapFigures
	var windows [][2]time.Time // when the reaper deleted: from a wave's load to its end
	stop := make(chan struct{})
	var offered []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		offered = h.offerUntil(b, "hr", 200, stop)
	}()
	for first := 0; first < n; first += wave {
		k := min(wave, n-first)
		// Each run of the wave ended a minute and a moment ago: all expired.
		if _, err := storetest.LoadHistory(ctx, h.db, storetest.History{Project: project, Domain: domain, Prefix: "ttl-",
			First: first, N: k, Start: time.Now().Add(-61 * time.Second), Every: time.Microsecond,
			Took: 200 * time.Millisecond, AfterCompletion: time.Minute}); err != nil {
			b.Fatal(err)
		}
		// The loader's pages written now, not while the reaper is timed:
		// runs that arrive one by one are written as they come.
		h.exec(b, `CHECKPOINT`)
		t0 := time.Now()
		h.waitReaped(b)
		t1 := time.Now()
		windows = append(windows, [2]time.Time{t0, t1})
		f.busy += t1.Sub(t0)
		f.runs += k
		f.waves++
		f.rates = append(f.rates, round(float64(k)/t1.Sub(t0).Seconds(), 0))
		h.exec(b, `VACUUM runs, actions, tasks, attempts, run_events`)
	}
	close(stop)
	<-done
	lat := h.dispatchTimes(b, offered, func(created time.Time) bool {
		for _, w := range windows {
			if !created.Before(w[0]) && created.Before(w[1]) {
				return true
			}
		}
		return false
	})
	if len(lat) == 0 {
		b.Fatal("no task dispatched while the reaper deleted")
	}
	f.counted, f.offered = len(lat), offered
	f.dispatchP50, f.dispatch = percentile(lat, 50), percentile(lat, 99)
	fmt.Printf("history reaper: %d runs in %d waves, %.0f runs/s, dispatch p99 %.1f ms meanwhile\n", f.runs, f.waves,
		float64(f.runs)/f.busy.Seconds(), ms(f.dispatch))
	return f
}

// dispatchAt offers single-task runs named <prefix>-<i> at rate per second
// for dur (open loop, as BenchmarkDispatchLatency) and returns, sorted, the
// PENDING → RUNNING times of their tasks created after the first 2 s.
func (h *historyBench) dispatchAt(b *testing.B, prefix string, rate int, dur time.Duration) []time.Duration {
	names := make([]string, int(dur.Seconds()*float64(rate)))
	start := time.Now()
	offer(b, rate, dur, func(ctx context.Context, i int, _ time.Time) error {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		return createRun(ctx, h.c, names[i], noopSpec(1))
	})
	return h.dispatchTimes(b, names, func(created time.Time) bool { return created.After(start.Add(2 * time.Second)) })
}

// offerUntil offers single-task runs named <prefix>-<i> at rate per second
// until stop closes, and returns their names once every create answered.
// A refused create fails b.
func (h *historyBench) offerUntil(b *testing.B, prefix string, rate int, stop chan struct{}) []string {
	var names []string
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		select {
		case <-stop:
			wg.Wait()
			return names
		case <-tick.C:
		}
		name := fmt.Sprintf("%s-%d", prefix, i)
		names = append(names, name)
		wg.Go(func() {
			if err := createRun(context.Background(), h.c, name, noopSpec(1)); err != nil {
				b.Error(err)
			}
		})
	}
}

// dispatchTimes waits until the runs of names ended and returns, sorted,
// the PENDING → RUNNING time of each one's task (tasks.created_at →
// attempts.started_at, as BenchmarkDispatchLatency counts it) created at a
// time keep keeps.
func (h *historyBench) dispatchTimes(b *testing.B, names []string, keep func(created time.Time) bool) []time.Duration {
	h.waitEnded(b, names, 5*time.Minute)
	rows, err := h.db.Query(`SELECT t.created_at, extract(epoch FROM a.started_at - t.created_at)
		FROM tasks t JOIN attempts a ON a.task_id = t.id AND a.number = 1
		WHERE t.project = $1 AND t.domain = $2 AND t.run_name = ANY($3)`, project, domain, names)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var lat []time.Duration
	for rows.Next() {
		var created time.Time
		var s float64
		if err := rows.Scan(&created, &s); err != nil {
			b.Fatal(err)
		}
		if keep(created) {
			lat = append(lat, secs(s))
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	return lat
}

// getRuns offers GET run over names at rate per second for dur (as
// BenchmarkAPIGetRun, offerGets) and returns the p50 and p99.
func (h *historyBench) getRuns(b *testing.B, names []string, rate int, dur time.Duration) (p50, p99 time.Duration) {
	lat, _ := offerGets(b, h.Stack, rate, dur, func(i int) string {
		return fmt.Sprintf("%s/v1/projects/%s/domains/%s/runs/%s", h.APIURL, project, domain, names[i%len(names)])
	})
	return percentile(lat, 50), percentile(lat, 99)
}

// waitReaped waits until no run with an expiry is left.
func (h *historyBench) waitReaped(b *testing.B) {
	h.Eventually(10*time.Minute, "the expired runs reaped", func() bool {
		var left int
		if err := h.db.QueryRow(`SELECT count(*) FROM runs WHERE expires_at IS NOT NULL`).Scan(&left); err != nil {
			b.Fatal(err)
		}
		return left == 0
	})
}

// waitEnded waits until every run of names has ended, at most timeout.
func (h *historyBench) waitEnded(b *testing.B, names []string, timeout time.Duration) {
	h.Eventually(timeout, fmt.Sprintf("%d runs ended", len(names)), func() bool {
		var ended int
		if err := h.db.QueryRow(`SELECT count(*) FROM runs WHERE project = $1 AND domain = $2 AND name = ANY($3)
			AND ended_at IS NOT NULL`, project, domain, names).Scan(&ended); err != nil {
			b.Fatal(err)
		}
		return ended == len(names)
	})
}

// size is the database's size in bytes.
func (h *historyBench) size(b *testing.B) int64 {
	var n int64
	if err := h.db.QueryRow(`SELECT pg_database_size(current_database())`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

func (h *historyBench) exec(b *testing.B, q string) {
	if _, err := h.db.Exec(q); err != nil {
		b.Fatalf("%s: %v", q, err)
	}
}

// ratio is a ÷ b.
func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// mib is n bytes in MiB.
func mib(n int64) float64 { return round(float64(n)/(1<<20), 1) }
