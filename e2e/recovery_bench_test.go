package e2e

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkDeadWorkerRecovery measures how long after kill -9 of an executor
// running 10 `sleep` tasks every task is RUNNING on a second, idle executor,
// over CAPSTAN_BENCH_TRIALS trials (default 20) on one stack (its Redis a
// private server), and prints p50, p99 and max, and its summary (see
// report). Each trial also checks that the move charged the preemption
// budget only and that no process of the killed executor's attempts
// survived (see killRecovery). The killed executor's tasks wait out its
// heartbeat grace first: the stack's e2e settings (heartbeat 300ms, grace
// 3s) bound the figure, not the defaults (2s, 10s).
// One run does every trial, whatever b.N.
func BenchmarkDeadWorkerRecovery(b *testing.B) {
	trials := 20
	if v, err := strconv.Atoi(os.Getenv("CAPSTAN_BENCH_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	const tasks = 10
	s := Start(b, bins, Options{Executors: 1, Env: livenessEnv, Redis: startRedis(b).Opt})
	d := make([]time.Duration, 0, trials)
	for victim := 1; victim <= trials; victim++ {
		d = append(d, killRecovery(b, s, victim, victim+1, tasks))
	}
	slices.Sort(d)
	p50, p99 := percentile(d, 50), percentile(d, 99)
	b.ReportMetric(p50.Seconds(), "p50-s")
	b.ReportMetric(p99.Seconds(), "p99-s")
	fmt.Printf("dead-worker recovery, %d tasks, %d trials (heartbeat 300ms, grace 3s): p50 %s  p99 %s  max %s\n",
		tasks, trials, p50.Round(time.Millisecond), p99.Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
	report(b, "dead_worker_recovery", benchResult{Title: "Dead-worker recovery (kill -9 → RUNNING elsewhere)",
		Result: fmt.Sprintf("p50 %.2f s, p99 %.2f s over %d trials (heartbeat 300ms, grace 3s)", p50.Seconds(), p99.Seconds(), trials),
		Target: "p99 ≤ 10 s", Met: p99 <= 10*time.Second,
		Figures: map[string]any{"tasks": tasks, "trials": trials, "heartbeat": "300ms", "grace": "3s",
			"p50_s": round(p50.Seconds(), 3), "p99_s": round(p99.Seconds(), 3), "max_s": round(d[len(d)-1].Seconds(), 3)}})
}

// percentile returns the nearest-rank p-th percentile of sorted d.
func percentile(d []time.Duration, p int) time.Duration {
	i := (p*len(d) + 99) / 100 // ceil(p/100·n)
	return d[max(i, 1)-1]
}
