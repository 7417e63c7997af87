package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// BenchmarkE2ELatency offers single-step noop runs open loop at
// CAPSTAN_BENCH_E2E_RATE per second (50) for CAPSTAN_BENCH_E2E_DURATION
// (30s) to a stack of two executors and measures, for each run, the time a
// client waits: from just before its create request to when the client
// reads the run's `end` event with phase SUCCEEDED on the run's event
// stream (GET .../runs/{run}/events, opened as soon as the create answers:
// the stream replays the run's rows from the start, so nothing committed
// in between is missed, and pushes what follows as it commits). The stream
// is how a client watches a run without polling; a poll every few ms would
// add its interval to the figure and a GET per poll to the api's load.
// Runs created in the first CAPSTAN_BENCH_WARMUP (2s) are not counted.
// Targets p50 ≤ 20 ms and p99 ≤ 50 ms.
func BenchmarkE2ELatency(b *testing.B) {
	rate := envInt("CAPSTAN_BENCH_E2E_RATE", 50)
	dur := envDuration("CAPSTAN_BENCH_E2E_DURATION", 30*time.Second)
	warmup := envDuration("CAPSTAN_BENCH_WARMUP", 2*time.Second)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	c := loadClient(b, r.Stack, 64)
	lat := make([]time.Duration, int(dur.Seconds()*float64(rate)))
	sent := make([]time.Time, len(lat))
	cpu := newCPUMeter(r)
	profiled := r.Profile(b, "e2e_latency", dur)
	start := time.Now()
	n, late := offer(b, rate, dur, func(ctx context.Context, i int, _ time.Time) error {
		sent[i] = time.Now()
		d, err := runToSuccess(ctx, c, fmt.Sprintf("e2e-%d", i))
		lat[i] = d
		return err
	})
	elapsed := time.Since(start)
	usage := cpu.Stop()
	profiled()
	var counted []time.Duration
	for i := range n {
		if sent[i].Sub(start) >= warmup {
			counted = append(counted, lat[i])
		}
	}
	if len(counted) == 0 {
		b.Fatal("no run counted")
	}
	slices.Sort(counted)
	p50, p99 := percentile(counted, 50), percentile(counted, 99)
	server := serverLatency(b, r, start.Add(warmup))
	b.ReportMetric(ms(p99), "p99-ms")
	report(b, "e2e_latency", benchResult{Title: "End-to-end latency (create → client sees SUCCEEDED)",
		Result: fmt.Sprintf("p50 %.1f ms, p99 %.1f ms at %.0f runs/s offered", ms(p50), ms(p99), float64(n)/elapsed.Seconds()),
		Target: "p50 ≤ 20 ms and p99 ≤ 50 ms", Met: p50 <= 20*time.Millisecond && p99 <= 50*time.Millisecond,
		Figures: map[string]any{"rate_per_s": rate, "duration_s": dur.Seconds(), "offered": n,
			"offered_per_s": round(float64(n)/elapsed.Seconds(), 1), "submitted_late": late, "counted": len(counted),
			"p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(counted[len(counted)-1]), "min_ms": ms(counted[0]),
			"server_p50_ms": server[0], "server_p99_ms": server[1], "cpu": usage, "peak_rss_mib": r.PeakRSS(),
			"edges": "harness clock: before POST .../runs → the run stream's end event with phase SUCCEEDED read; " +
				"server_*: runs.created_at (api clock) → runs.ended_at (scheduler clock)"}})
}

// runToSuccess creates run name (one noop step), follows its event stream
// until the end event, and returns the time from before the create to the
// end event read. Errors: a refused create or stream, a stream that closed
// without an end, an end whose phase is not SUCCEEDED.
func runToSuccess(ctx context.Context, c *api.ClientWithResponses, name string) (time.Duration, error) {
	start := time.Now()
	if err := createRun(ctx, c, name, noopSpec(1)); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := c.WatchRunEvents(ctx, project, domain, name, &api.WatchRunEventsParams{})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("watch %s: %d", name, resp.StatusCode)
	}
	var d time.Duration
	end := ""
	for ev := range readSSE(resp.Body) { // to the body's end, so that its connection is reused
		if ev.name == "end" && end == "" {
			d, end = time.Since(start), ev.data
		}
	}
	switch end {
	case `{"phase":"SUCCEEDED"}`:
		return d, nil
	case "":
		return 0, errors.New("run " + name + ": the stream closed without an end")
	default:
		return d, fmt.Errorf("run %s ended: %s", name, end)
	}
}

// serverLatency returns the p50 and p99, in ms, of runs.ended_at −
// runs.created_at over the runs created from since: the same runs seen from
// the services' clocks, without the client's round trips.
func serverLatency(tb testing.TB, r *rig, since time.Time) [2]float64 {
	tb.Helper()
	var p50, p99 float64
	err := r.db.QueryRow(`SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY d), percentile_disc(0.99) WITHIN GROUP (ORDER BY d)
		FROM (SELECT extract(epoch FROM ended_at - created_at) * 1000 AS d FROM runs WHERE created_at >= $1) x`, since).
		Scan(&p50, &p99)
	if err != nil {
		tb.Fatal(err)
	}
	return [2]float64{round(p50, 2), round(p99, 2)}
}
