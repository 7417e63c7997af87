package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// BenchmarkEventPublish publishes events at CAPSTAN_BENCH_EVENT_RATE per
// second (500) for CAPSTAN_BENCH_EVENT_DURATION (30s), open loop over
// keep-alive connections, each with an id of its own, to a stack of two
// executors where one trigger of the events' key matches every event (its
// filter reads the payload, its mapping gives the template's required
// number param): each publication starts one run, created in the
// publication's own statement, of one noop step. Each publication is
// timed from when it was due to its 202 answer read, which must list its
// run: the run is committed then, visible to every reader, and the
// scheduler told of it. created_* is the lower bound the rows give: from
// when the publication was due (harness clock) to its run's created_at
// (api clock, the same host's), stamped before the insert, so before the
// commit. Publications due in the first CAPSTAN_BENCH_WARMUP (2s) are not
// counted.
//
// Two shapes, each on a fresh stack: "with_runs", the target's, where the
// scheduler starts the runs and the executors run them while the events
// come; and "alone", where the scheduler is stopped once the trigger is
// in place, so the runs are created and stay QUEUED: what the publication
// path alone costs, for context. Target: with_runs p99 ≤ 50 ms at 500
// events/s for 30 s.
func BenchmarkEventPublish(b *testing.B) {
	rate := envInt("CAPSTAN_BENCH_EVENT_RATE", 500)
	dur := envDuration("CAPSTAN_BENCH_EVENT_DURATION", 30*time.Second)
	figures := map[string]any{"rate_per_s": rate, "duration_s": dur.Seconds(), "executors": 2,
		"edges": "harness clock: when the publication was due → its 202 answer (listing its one run) read; " +
			"created_*: when it was due → the run's runs.created_at (api clock, stamped before the commit)"}
	var parts []string
	var rss []map[string]float64
	measured := map[string]eventLoad{}
	for _, shape := range []string{"with_runs", "alone"} {
		var l eventLoad
		b.Run(shape, func(b *testing.B) { l = measurePublish(b, rate, dur, shape == "alone") })
		if l.counted == 0 {
			continue // not selected by -bench
		}
		measured[shape], figures[shape] = l, l.figures()
		rss = append(rss, l.peakRSS)
		parts = append(parts, fmt.Sprintf("%s: p50 %.2f ms, p99 %.2f ms at %.0f events/s", shape, ms(l.p50), ms(l.p99),
			l.perSec))
	}
	if len(parts) == 0 {
		return
	}
	figures["peak_rss_mib"] = maxRSS(rss...)
	with, ok := measured["with_runs"]
	if ok {
		b.ReportMetric(ms(with.p99), "p99-ms")
	}
	report(b, "event_publish", benchResult{Title: "Event publish → run created", Result: strings.Join(parts, "; "),
		Target: "p99 ≤ 50 ms at 500 events/s for 30 s, one matching trigger each (with_runs)",
		Met:    ok && with.p99 <= 50*time.Millisecond && rate >= 500 && dur >= 30*time.Second, Figures: figures})
}

// eventLoad is what one shape of BenchmarkEventPublish measured.
type eventLoad struct {
	published, counted, late, succeeded int
	perSec                              float64
	p50, p99, p999, max                 time.Duration
	created                             [2]float64 // created_p50_ms, created_p99_ms
	cpu                                 map[string]any
	peakRSS                             map[string]float64
}

// figures is l as the summary's figures.
func (l eventLoad) figures() map[string]any {
	return map[string]any{"published": l.published, "counted": l.counted, "sent_late": l.late,
		"achieved_per_s": round(l.perSec, 1), "p50_ms": ms(l.p50), "p99_ms": ms(l.p99), "p999_ms": ms(l.p999),
		"max_ms": ms(l.max), "created_p50_ms": l.created[0], "created_p99_ms": l.created[1],
		"runs_succeeded_at_end": l.succeeded, "cpu": l.cpu, "peak_rss_mib": l.peakRSS}
}

// measurePublish runs one shape on a fresh stack (alone: its scheduler
// stopped once the trigger is in place).
func measurePublish(b *testing.B, rate int, dur time.Duration, alone bool) eventLoad {
	warmup := envDuration("CAPSTAN_BENCH_WARMUP", 2*time.Second)
	r := benchStack(b, 2, envInt("CAPSTAN_BENCH_SLOTS", 100))
	subscribe(b, loadClient(b, r.Stack, 2))
	if alone {
		r.Kill("scheduler")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 64, 64
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	url := fmt.Sprintf("%s/v1/projects/%s/domains/%s/events", r.APIURL, project, domain)
	total := int(dur.Seconds() * float64(rate))
	lat := make([]time.Duration, total)
	dues := make([]time.Time, total)
	cpu := newCPUMeter(r)
	profiled := r.Profile(b, "event_publish", dur)
	start := time.Now()
	n, late := offer(b, rate, dur, func(ctx context.Context, i int, due time.Time) error {
		dues[i] = due
		err := publishOne(ctx, client, r.Stack, url, i)
		lat[i] = time.Since(due)
		return err
	})
	elapsed := time.Since(start)
	l := eventLoad{published: n, late: late, perSec: float64(n) / elapsed.Seconds(), cpu: cpu.Stop()}
	profiled()
	l.created = createdLatency(b, r, dues[:n], start.Add(warmup))
	l.succeeded = runsSucceeded(b, r)
	var counted []time.Duration
	for i := range n {
		if dues[i].Sub(start) >= warmup {
			counted = append(counted, lat[i])
		}
	}
	if len(counted) == 0 {
		b.Fatal("no publication counted")
	}
	slices.Sort(counted)
	l.counted = len(counted)
	l.p50, l.p99, l.max = percentile(counted, 50), percentile(counted, 99), counted[len(counted)-1]
	l.p999 = counted[min(len(counted)-1, len(counted)*999/1000)]
	l.peakRSS = r.PeakRSS()
	return l
}

// subscribe pushes the template the events' runs run (one noop step, a
// required number param) and the trigger that matches every event.
func subscribe(tb testing.TB, c *api.ClientWithResponses) {
	tb.Helper()
	ctx := context.Background()
	number := api.Number
	push, err := c.PushWorkflowWithResponse(ctx, project, domain, api.PushWorkflowRequest{Name: "on-order",
		Params: &[]api.Param{{Name: "amount", Type: &number, Required: ptr(true)}}, Spec: noopSpec(1)})
	if err != nil {
		tb.Fatalf("push the workflow: %v", err)
	}
	if push.JSON201 == nil {
		tb.Fatalf("push the workflow: %d %s", push.StatusCode(), push.Body)
	}
	trig, err := c.CreateTriggerWithResponse(ctx, project, domain, api.CreateTriggerRequest{Name: "orders",
		EventKey: "order.created", Workflow: api.WorkflowRef{Name: "on-order"}, Filter: ptr("event.payload.amount >= 0"),
		Params: &map[string]string{"amount": "event.payload.amount"}})
	if err != nil {
		tb.Fatalf("create the trigger: %v", err)
	}
	if trig.JSON201 == nil {
		tb.Fatalf("create the trigger: %d %s", trig.StatusCode(), trig.Body)
	}
}

// publishOne publishes event i (id "ev-<i>", payload {"amount": i, ...}).
// Errors: an answer other than a 202 listing one run.
func publishOne(ctx context.Context, client *http.Client, s *Stack, url string, i int) error {
	body := fmt.Appendf(nil, `{"key":"order.created","id":"ev-%d","payload":{"amount":%d,"customer":"c-%d"}}`, i, i, i%100)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	s.Authorize(req)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	var out struct{ Runs []string }
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &out) != nil || len(out.Runs) != 1 {
		return fmt.Errorf("publish ev-%d: %d %s", i, resp.StatusCode, raw)
	}
	return nil
}

// createdLatency returns the p50 and p99, in ms, from each counted
// publication's due time (those due from since) to its run's created_at.
// Every publication must have exactly one run.
func createdLatency(tb testing.TB, r *rig, dues []time.Time, since time.Time) [2]float64 {
	tb.Helper()
	rows, err := r.db.Query(`SELECT event_id, created_at FROM runs WHERE trigger_name = 'orders'`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	seen := make([]bool, len(dues))
	var d []time.Duration
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			tb.Fatal(err)
		}
		i, err := strconv.Atoi(id[len("ev-"):])
		if err != nil || i >= len(dues) || seen[i] {
			tb.Fatalf("run of event %s: unexpected or twice", id)
		}
		seen[i] = true
		if !dues[i].Before(since) {
			d = append(d, at.Sub(dues[i]))
		}
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	if i := slices.Index(seen, false); i >= 0 {
		tb.Fatalf("event ev-%d has no run", i)
	}
	if len(d) == 0 {
		return [2]float64{}
	}
	slices.Sort(d)
	return [2]float64{ms(percentile(d, 50)), ms(percentile(d, 99))}
}

// runsSucceeded counts the stack's runs that SUCCEEDED.
func runsSucceeded(tb testing.TB, r *rig) int {
	tb.Helper()
	var n int
	if err := r.db.QueryRow(`SELECT count(*) FROM runs WHERE phase = 'SUCCEEDED'`).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}
