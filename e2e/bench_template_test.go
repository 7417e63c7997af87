package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
)

// BenchmarkCreateFromTemplate compares creating a run from a workflow
// template with creating one of an inline spec of the same shape (one noop
// step, two typed params given by the run): CAPSTAN_BENCH_TEMPLATE_RUNS
// (2,000) creates of each kind, interleaved, from 4 concurrent clients, on
// a stack of one executor that runs them meanwhile. Each create is timed
// from its request to its 201. Target: the template's median and mean
// create latency at most 10 % above the inline spec's.
func BenchmarkCreateFromTemplate(b *testing.B) {
	n := envInt("CAPSTAN_BENCH_TEMPLATE_RUNS", 2000)
	const clients = 4
	r := benchStack(b, 1, envInt("CAPSTAN_BENCH_SLOTS", 100))
	c := loadClient(b, r.Stack, clients)
	ctx := context.Background()
	number := api.ParamType("number")
	params := []api.Param{{Name: "TARGET", Required: ptr(true)}, {Name: "COUNT", Type: &number, Default: 3}}
	spec := noopSpec(1)
	pushed, err := c.PushWorkflowWithResponse(ctx, project, domain, api.PushWorkflowRequest{Name: "noop", Params: &params, Spec: spec})
	if err != nil || pushed.JSON201 == nil {
		b.Fatalf("push the template: %v %s", err, pushed.Body)
	}
	inline := spec
	inline.Params = &params
	values := api.ParamValues{"TARGET": "db", "COUNT": 5}
	bodies := [2]func(i int) api.CreateRunRequest{
		func(i int) api.CreateRunRequest {
			return api.CreateRunRequest{Name: ptr(fmt.Sprintf("inline-%d", i)), Spec: &inline, Params: &values}
		},
		func(i int) api.CreateRunRequest {
			return api.CreateRunRequest{Name: ptr(fmt.Sprintf("tmpl-%d", i)), Workflow: &api.WorkflowRef{Name: "noop"}, Params: &values}
		},
	}
	latencies := [2][]time.Duration{make([]time.Duration, n), make([]time.Duration, n)}
	next := make(chan int)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for k := range next {
				kind, i := k%2, k/2
				start := time.Now()
				resp, err := c.CreateRunWithResponse(ctx, project, domain, nil, bodies[kind](i))
				latencies[kind][i] = time.Since(start)
				if err != nil || resp.JSON201 == nil {
					b.Errorf("create %d of kind %d: %v %s", i, kind, err, resp.Body)
				}
			}
		})
	}
	for k := range 2 * n {
		next <- k
	}
	close(next)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	stats := func(ds []time.Duration) (p50, mean, p99 time.Duration) {
		s := slices.Clone(ds)
		slices.Sort(s)
		var sum time.Duration
		for _, d := range s {
			sum += d
		}
		return s[len(s)/2], sum / time.Duration(len(s)), s[len(s)*99/100]
	}
	ip50, imean, ip99 := stats(latencies[0])
	tp50, tmean, tp99 := stats(latencies[1])
	ratio50, ratioMean := float64(tp50)/float64(ip50), float64(tmean)/float64(imean)
	figures := map[string]any{"runs_each": n, "clients": clients,
		"inline_p50_ms": ms(ip50), "inline_mean_ms": ms(imean), "inline_p99_ms": ms(ip99),
		"template_p50_ms": ms(tp50), "template_mean_ms": ms(tmean), "template_p99_ms": ms(tp99),
		"ratio_p50": round(ratio50, 3), "ratio_mean": round(ratioMean, 3), "peak_rss_mib": r.PeakRSS()}
	report(b, "create_from_template", benchResult{Title: "Create a run from a template vs an inline spec",
		Result: fmt.Sprintf("template p50 %.2f ms, mean %.2f ms; inline p50 %.2f ms, mean %.2f ms (%+.1f %%, %+.1f %%)",
			ms(tp50), ms(tmean), ms(ip50), ms(imean), (ratio50-1)*100, (ratioMean-1)*100),
		Target: "≤ 10 % slower (median and mean)", Met: n >= 2000 && ratio50 <= 1.10 && ratioMean <= 1.10, Figures: figures})
}
