package e2e

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

// BenchmarkDeadWorkerRecovery measures how long after kill -9 of an executor
// running 10 `sleep` tasks every task is RUNNING on a second, idle executor,
// over CAPSTAN_BENCH_TRIALS trials (default 20) on one stack of release
// builds with the services' defaults (heartbeat 1s, worker grace 5s, retry
// backoff up to 1s) and a private Redis, and prints p50, p99 and max, and
// its summary (see report). Each trial also checks that the move charged the
// preemption budget only and that no process of the killed executor's
// attempts survived (see killRecovery). One run does every trial, whatever
// b.N.
func BenchmarkDeadWorkerRecovery(b *testing.B) {
	trials := envInt("CAPSTAN_BENCH_TRIALS", 20)
	const tasks = 10
	s := Start(b, bins, Options{Executors: 1, Defaults: true, Redis: startRedis(b).Opt,
		Env: append(benchEnv(10), "CAPSTAN_SHUTDOWN_TIMEOUT=5s")})
	d := make([]time.Duration, 0, trials)
	for victim := 1; victim <= trials; victim++ {
		d = append(d, killRecovery(b, s, victim, victim+1, tasks))
	}
	slices.Sort(d)
	p50, p99 := percentile(d, 50), percentile(d, 99)
	b.ReportMetric(p50.Seconds(), "p50-s")
	b.ReportMetric(p99.Seconds(), "p99-s")
	report(b, "dead_worker_recovery", benchResult{Title: "Dead-worker recovery (kill -9 → RUNNING elsewhere)",
		Result: fmt.Sprintf("p50 %.2f s, p99 %.2f s over %d trials (defaults: heartbeat 1s, grace 5s)", p50.Seconds(), p99.Seconds(), trials),
		Target: "p99 ≤ 10 s", Met: p99 <= 10*time.Second,
		Figures: map[string]any{"tasks": tasks, "trials": trials, "settings": "service defaults", "extra_env": os.Getenv("CAPSTAN_BENCH_ENV"),
			"p50_s": round(p50.Seconds(), 3), "p99_s": round(p99.Seconds(), 3), "max_s": round(d[len(d)-1].Seconds(), 3),
			"peak_rss_mib": s.PeakRSS()}}) // of the processes still alive: the killed executors are gone
}

// percentile returns the nearest-rank p-th percentile of sorted d.
func percentile(d []time.Duration, p int) time.Duration {
	i := (p*len(d) + 99) / 100 // ceil(p/100·n)
	return d[max(i, 1)-1]
}
