package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// BenchmarkRateLimit measures how evenly a rate limit paces its tasks: a
// rate limit of 100/s and CAPSTAN_BENCH_RATELIMIT_TASKS (10,000) noop
// tasks waiting on it (10 runs of 1,000 replicas), on a stack of two
// executors. For CAPSTAN_BENCH_RATELIMIT_DURATION (25s) after the first
// start it counts the attempts started (started_at) in each 1 s window
// after the first (which holds the full bucket's burst), read 2 s after
// the last (so that its starts are reported), then stops. Target: every
// window within 5 % of 100.
func BenchmarkRateLimit(b *testing.B) {
	const limit = 100
	tasks := envInt("CAPSTAN_BENCH_RATELIMIT_TASKS", 10000)
	dur := envDuration("CAPSTAN_BENCH_RATELIMIT_DURATION", 25*time.Second)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	ctx := context.Background()
	putRateLimit(b, r.Client, "bench", limit, "1s")
	spec := noopSpec(1000)
	spec.Steps[0].RateLimits = &[]api.RateLimitUse{{Name: "bench"}}
	for i := range tasks / 1000 {
		if err := createRun(ctx, r.Client, fmt.Sprintf("limited-%d", i), spec); err != nil {
			b.Fatal(err)
		}
	}
	var first time.Time
	deadline := time.Now().Add(30 * time.Second)
	for first.IsZero() {
		if time.Now().After(deadline) {
			b.Fatal("no attempt started in 30s")
		}
		<-time.After(100 * time.Millisecond)
		var at *time.Time
		if err := r.db.QueryRowContext(ctx, `SELECT min(started_at) FROM attempts`).Scan(&at); err != nil {
			b.Fatal(err)
		}
		if at != nil {
			first = *at
		}
	}
	<-time.After(time.Until(first.Add(dur + 2*time.Second))) // the measured windows, and a window of reports
	windows, err := startsPerSecond(ctx, r.db)
	if err != nil {
		b.Fatal(err)
	}
	n := int(dur / time.Second)
	if len(windows) < n+1 {
		b.Fatalf("%d windows of starts, want %d: %v", len(windows), n+1, windows)
	}
	measured := windows[1 : n+1]
	lo, hi := slices.Min(measured), slices.Max(measured)
	total := 0
	for _, w := range measured {
		total += w
	}
	mean := float64(total) / float64(len(measured))
	met := float64(lo) >= 0.95*limit && float64(hi) <= 1.05*limit
	report(b, "rate_limit", benchResult{
		Title:  fmt.Sprintf("rate limit %d/s, %d tasks waiting", limit, tasks),
		Result: fmt.Sprintf("%.1f starts/s mean over %d windows, min %d, max %d", mean, len(measured), lo, hi),
		Target: "every 1 s window after the first within 5 % of 100",
		Met:    met,
		Figures: map[string]any{"limit_per_second": limit, "tasks": tasks, "windows": measured, "first_window": windows[0],
			"min": lo, "max": hi, "mean": mean, "measured_seconds": n},
	})
}
