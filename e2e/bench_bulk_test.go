package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// BenchmarkAcceptBulk measures how long the api takes to accept
// CAPSTAN_BENCH_BULK_RUNS (20,000) single-task noop runs through the bulk
// endpoint, POST /v1/projects/{p}/domains/{d}/runs/batch with a body
// {"runs": [CreateRunRequest, ...]} of CAPSTAN_BENCH_BULK_BATCH (1,000)
// runs, from CAPSTAN_BENCH_BULK_CLIENTS (4) concurrent clients, on a stack
// of two executors (which start on the runs meanwhile). The clock runs from
// the first request to the last answer; then the runs table must hold
// every run. Submission only: the runs are not awaited. Target ≤ 5 s. An
// api without the endpoint (404 or 405) gives met false and the result
// "bulk endpoint missing".
func BenchmarkAcceptBulk(b *testing.B) {
	total := envInt("CAPSTAN_BENCH_BULK_RUNS", 20000)
	batch := min(envInt("CAPSTAN_BENCH_BULK_BATCH", 1000), total)
	clients := envInt("CAPSTAN_BENCH_BULK_CLIENTS", 4)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = clients
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	url := fmt.Sprintf("%s/v1/projects/%s/domains/%s/runs/batch", r.APIURL, project, domain)
	figures := map[string]any{"runs": total, "batch": batch, "clients": clients, "executors": 2}
	cpu := newCPUMeter(r)
	profiled := r.Profile(b, "accept_bulk", envDuration("CAPSTAN_BENCH_PROFILE_TIME", 5*time.Second))
	start := time.Now()
	status, body := postBatches(b, hc, r.Stack, url, total, batch, clients)
	elapsed := time.Since(start)
	profiled()
	figures["cpu"], figures["peak_rss_mib"] = cpu.Stop(), r.PeakRSS()
	res := benchResult{Title: "Accept runs in bulk (POST .../runs/batch)", Target: "20,000 runs accepted in ≤ 5 s",
		Figures: figures}
	switch {
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		res.Result, figures["status"] = "bulk endpoint missing", status
	case status != 0:
		res.Result, figures["status"], figures["body"] = fmt.Sprintf("bulk endpoint answered %d", status), status, body
	default:
		var n int
		if err := r.db.QueryRow(`SELECT count(*) FROM runs`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		rate := float64(total) / elapsed.Seconds()
		figures["elapsed_s"], figures["runs_per_s"], figures["runs_stored"] = round(elapsed.Seconds(), 3), round(rate, 1), n
		res.Result = fmt.Sprintf("%d runs in %.2f s (%.0f runs/s)", total, elapsed.Seconds(), rate)
		if n != total {
			res.Result += fmt.Sprintf(", but %d stored", n)
		}
		res.Met = n == total && total >= 20000 && elapsed <= 5*time.Second
		b.ReportMetric(elapsed.Seconds(), "accept-s")
	}
	report(b, "accept_bulk", res)
}

// postBatches posts total runs (named bulk-<i>, one noop step each) to url
// in requests of batch runs from clients concurrent clients. It returns
// the first answer that was not 2xx, status and body (the rest are not
// sent), or status 0 when every request was accepted. A transport error
// fails tb.
func postBatches(tb testing.TB, hc *http.Client, s *Stack, url string, total, batch, clients int) (status int, body string) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	offsets := make(chan int)
	var once sync.Once
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for off := range offsets {
				code, text, err := postBatch(ctx, hc, s, url, off, min(batch, total-off))
				if err != nil && ctx.Err() == nil {
					tb.Errorf("post batch at %d: %v", off, err)
				}
				if err != nil || code/100 != 2 {
					once.Do(func() { status, body = code, text; cancel() })
				}
			}
		})
	}
	for off := 0; off < total && ctx.Err() == nil; off += batch {
		select {
		case offsets <- off:
		case <-ctx.Done():
		}
	}
	close(offsets)
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
	return status, body
}

// postBatch posts runs off..off+n-1 and returns the answer's status and, when
// it is not 2xx, its body (at most 1 KiB).
func postBatch(ctx context.Context, hc *http.Client, s *Stack, url string, off, n int) (int, string, error) {
	runs := make([]api.CreateRunRequest, n)
	for i := range runs {
		runs[i] = api.CreateRunRequest{Name: ptr(fmt.Sprintf("bulk-%d", off+i)), Spec: ptr(noopSpec(1))}
	}
	payload, err := json.Marshal(map[string]any{"runs": runs})
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	s.Authorize(req)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 == 2 {
		text = nil
	}
	return resp.StatusCode, string(text), err
}
