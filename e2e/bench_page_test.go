package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// BenchmarkAPIGetLargeRun times the GET of a run of 10,000 tasks and the
// GET of its action's pages of tasks. The run is one noop step's for_each
// over 10,000 items, run to SUCCEEDED on two executors of 100 slots: each
// task with its item and its attempt. Then, each for CAPSTAN_BENCH_LARGE_DURATION (15s) at
// CAPSTAN_BENCH_LARGE_RATE per second (20), open loop over keep-alive
// connections (each request timed from when it was due, as
// BenchmarkAPIGetRun's): GET of the run (its action's counts and first
// page of 20 tasks with their attempts), then GET of a page of 100 of the
// action's tasks (?cursor=, every page in turn). Target p99 ≤
// 50 ms for each.
func BenchmarkAPIGetLargeRun(b *testing.B) {
	rate := envInt("CAPSTAN_BENCH_LARGE_RATE", 20)
	dur := envDuration("CAPSTAN_BENCH_LARGE_DURATION", 15*time.Second)
	const steps, items = 1, 10000
	r := benchStack(b, 2, 100)
	c := loadClient(b, r.Stack, 8)
	list := make([]any, items)
	for i := range list {
		list[i] = i
	}
	spec := api.WorkflowSpec{Steps: []api.Step{{Name: "s0", Plugin: ptr("noop"), ForEach: &api.ForEach{Items: &list}}}}
	if err := createRun(context.Background(), c, "large", spec); err != nil {
		b.Fatal(err)
	}
	waitRuns(b, r.db, 1, 5*time.Minute)
	var runSeconds float64
	if err := r.db.QueryRow(`SELECT extract(epoch FROM ended_at - created_at) FROM runs WHERE name = 'large'`).
		Scan(&runSeconds); err != nil {
		b.Fatal(err)
	}

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 64, 64
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	runURL := fmt.Sprintf("%s/v1/projects/%s/domains/%s/runs/large", r.APIURL, project, domain)
	get := func(ctx context.Context, u string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		r.Authorize(req)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %d %.200s", u, resp.StatusCode, body)
		}
		return body, err
	}
	pages := actionPages(b, get, runURL, steps)
	runBody, err := get(context.Background(), runURL)
	if err != nil {
		b.Fatal(err)
	}

	cpu := newCPUMeter(r)
	profiled := r.Profile(b, "api", 2*dur)
	measure := func(url func(i int) string) (p50, p99, maxLat time.Duration, n, late int) {
		lat := make([]time.Duration, int(dur.Seconds()*float64(rate)))
		n, late = offer(b, rate, dur, func(ctx context.Context, i int, due time.Time) error {
			_, err := get(ctx, url(i))
			lat[i] = time.Since(due)
			return err
		})
		lat = lat[:n]
		slices.Sort(lat)
		return percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1], n, late
	}
	run50, run99, runMax, runN, runLate := measure(func(int) string { return runURL })
	page50, page99, pageMax, pageN, pageLate := measure(func(i int) string { return pages[i%len(pages)] })
	usage := cpu.Stop()
	profiled()
	b.ReportMetric(ms(run99), "run-p99-ms")
	b.ReportMetric(ms(page99), "page-p99-ms")
	report(b, "api_get_large_run", benchResult{Title: "API GET of a run of 10,000 tasks, and of its actions' pages",
		Result: fmt.Sprintf("GET run p50 %.2f ms, p99 %.2f ms; GET action page p50 %.2f ms, p99 %.2f ms; at %d req/s",
			ms(run50), ms(run99), ms(page50), ms(page99), rate),
		Target: "p99 ≤ 50 ms each",
		Met:    run99 <= 50*time.Millisecond && page99 <= 50*time.Millisecond && runN > 0 && pageN > 0,
		Figures: map[string]any{"tasks": items, "steps": steps, "for_each_items": items, "rate_per_s": rate,
			"duration_s": dur.Seconds(), "run_seconds": round(runSeconds, 2),
			"tasks_per_s": round(float64(items)/runSeconds, 1),
			"get_run":     map[string]any{"requests": runN, "sent_late": runLate, "p50_ms": ms(run50), "p99_ms": ms(run99), "max_ms": ms(runMax), "bytes": len(runBody)},
			"get_action_page": map[string]any{"pages": len(pages), "requests": pageN, "sent_late": pageLate, "p50_ms": ms(page50),
				"p99_ms": ms(page99), "max_ms": ms(pageMax)},
			"cpu": usage, "peak_rss_mib": r.PeakRSS()}})
}

// actionPages walks the pages of tasks of steps s0…s<steps-1> of the run
// at runURL (GET .../actions/{action}, then ?cursor= while a page gives
// tasks_next_cursor) and returns the URL of every page.
func actionPages(tb testing.TB, get func(context.Context, string) ([]byte, error), runURL string, steps int) []string {
	tb.Helper()
	var pages []string
	for i := range steps {
		u := fmt.Sprintf("%s/actions/s%d", runURL, i)
		for next := u; next != ""; {
			pages = append(pages, next)
			body, err := get(context.Background(), next)
			if err != nil {
				tb.Fatal(err)
			}
			var a struct {
				Cursor *string `json:"tasks_next_cursor"`
			}
			if err := json.Unmarshal(body, &a); err != nil {
				tb.Fatal(err)
			}
			next = ""
			if a.Cursor != nil {
				next = u + "?cursor=" + url.QueryEscape(*a.Cursor)
			}
		}
	}
	return pages
}
