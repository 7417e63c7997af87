package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// BenchmarkAPIGetRun offers GET /v1/projects/{p}/domains/{d}/runs/{run} at
// CAPSTAN_BENCH_API_RATE per second (1000) for CAPSTAN_BENCH_API_DURATION
// (30s), open loop over keep-alive connections: each request is timed from
// when it was due, so a slow answer also counts against the requests queued
// behind it (no coordinated omission). The runs are 100 finished runs of two
// noop steps (2 replicas, then 1: three tasks, each with its attempt), taken
// in turn. Target p99 ≤ 10 ms.
func BenchmarkAPIGetRun(b *testing.B) {
	rate := envInt("CAPSTAN_BENCH_API_RATE", 1000)
	dur := envDuration("CAPSTAN_BENCH_API_DURATION", 30*time.Second)
	const runs = 100
	r := benchStack(b, 1, 100)
	db := r.db
	c := loadClient(b, r.Stack, 8)
	spec := api.WorkflowSpec{Steps: []api.Step{{Name: "greet", Plugin: ptr("noop"), Replicas: ptr(2)},
		{Name: "done", Plugin: ptr("noop")}}}
	for i := range runs {
		if err := createRun(context.Background(), c, fmt.Sprintf("get-%d", i), spec); err != nil {
			b.Fatal(err)
		}
	}
	waitRuns(b, db, runs, 2*time.Minute)

	cpu := newCPUMeter(r)
	profiled := r.Profile(b, "api", dur)
	start := time.Now()
	lat, late := offerGets(b, r.Stack, rate, dur, func(i int) string {
		return fmt.Sprintf("%s/v1/projects/%s/domains/%s/runs/get-%d", r.APIURL, project, domain, i%runs)
	})
	n := len(lat)
	elapsed := time.Since(start)
	usage := cpu.Stop()
	profiled()
	p50, p99 := percentile(lat, 50), percentile(lat, 99)
	b.ReportMetric(ms(p99), "p99-ms")
	report(b, "api_get_run", benchResult{Title: "API GET run",
		Result: fmt.Sprintf("p50 %.2f ms, p99 %.2f ms at %.0f req/s", ms(p50), ms(p99), float64(n)/elapsed.Seconds()),
		Target: "p99 ≤ 10 ms at 1000 req/s for 30 s", Met: p99 <= 10*time.Millisecond && rate >= 1000 && dur >= 30*time.Second,
		Figures: map[string]any{"rate_per_s": rate, "duration_s": dur.Seconds(), "requests": n,
			"achieved_per_s": round(float64(n)/elapsed.Seconds(), 1), "sent_late": late, "p50_ms": ms(p50),
			"p99_ms": ms(p99), "p999_ms": ms(lat[min(len(lat)-1, len(lat)*999/1000)]), "max_ms": ms(lat[len(lat)-1]),
			"cpu": usage, "peak_rss_mib": r.PeakRSS()}})
}

// offerGets offers GET urlOf(i) at rate per second for dur, open loop over
// keep-alive connections (offer): each request is timed from when it was
// due, so a slow answer also counts against the requests queued behind it
// (no coordinated omission). It returns the latencies, sorted, and how many
// requests were sent late; an answer other than 200 fails tb.
func offerGets(tb testing.TB, s *Stack, rate int, dur time.Duration, urlOf func(i int) string) ([]time.Duration, int) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 64, 64
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	lat := make([]time.Duration, int(dur.Seconds()*float64(rate)))
	n, late := offer(tb, rate, dur, func(ctx context.Context, i int, due time.Time) error {
		url := urlOf(i)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		s.Authorize(req)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat[i] = time.Since(due)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
		}
		return err
	})
	lat = lat[:n]
	slices.Sort(lat)
	return lat, late
}
