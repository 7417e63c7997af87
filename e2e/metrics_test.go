package e2e

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// observedSpec is a small DAG: three steps, one of them with two replicas.
const observedSpec = `
mode: DAG
steps:
  - {name: a, command: "echo a"}
  - {name: b, command: "echo b", replicas: 2, depends_on: [a]}
  - {name: c, command: "echo c", depends_on: [b]}
`

// observedSteps is how many actions a run of observedSpec ends with
// SUCCEEDED: its three steps and its root.
const observedSteps = 4

// TestMetricsOfEveryService runs a workflow, then reads each service's
// /healthz, /readyz and /metrics: the seed's series are there with
// plausible values.
func TestMetricsOfEveryService(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1, Env: []string{"CAPSTAN_METRICS_REFRESH=200ms"}})
	schedAddr := s.LoggedAddr("scheduler", "scheduler started", "metrics")
	abortAddr := s.LoggedAddr("abort-reconciler", "serving health and metrics", "addr")
	var spec api.WorkflowSpec
	require.NoError(t, yaml.UnmarshalStrict([]byte(observedSpec), &spec))
	name := create(t, s, spec)
	waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)

	services := map[string]string{"api": s.APIURL, "scheduler": "http://" + schedAddr,
		"abort-reconciler": "http://" + abortAddr, "executor": executorURL(t, s)}
	for svc, base := range services {
		for _, probe := range []string{"/healthz", "/readyz"} {
			status, body := scrape(t, base+probe, "")
			require.Equal(t, http.StatusOK, status, "%s %s: %s", svc, probe, body)
		}
	}

	for _, page := range []string{"/queues/", "/debug/pprof/"} { // the operator pages on the api
		status, body := scrape(t, s.APIURL+page, s.Token)
		require.Equal(t, http.StatusOK, status, "%s: %s", page, body)
	}

	// The scheduler's gauges come from a grouped count at most 200ms old.
	s.Eventually(10*time.Second, "scheduler counts the run's actions", func() bool {
		return value(t, services["scheduler"], `capstan_actions_active{phase="SUCCEEDED"}`) >= observedSteps
	})
	sched := metricsOf(t, services["scheduler"], "")
	require.GreaterOrEqual(t, sample(t, sched, `capstan_tasks_active{state="SUCCEEDED"}`), 4.0, "a, b's two replicas, c")
	require.Equal(t, 1.0, sample(t, sched, `capstan_workers{state="alive"}`))
	require.GreaterOrEqual(t, sample(t, sched, `capstan_queue_tasks{queue="scheduler",state="pending"}`), 0.0)
	require.GreaterOrEqual(t, sample(t, sched, `capstan_queue_latency_seconds{queue="scheduler"}`), 0.0)
	require.Positive(t, sample(t, sched, `capstan_db_operation_duration_seconds_count{operation="AssignTasks"}`))
	require.Positive(t, sample(t, sched, `capstan_payload_size_bytes_count{kind="queue_payload"}`), "attempt:run pushes")

	apiM := metricsOf(t, services["api"], s.Token)
	require.Equal(t, 1.0, sample(t, apiM, `capstan_payload_size_bytes_count{kind="spec"}`))
	require.Positive(t, sample(t, apiM, `capstan_payload_size_bytes_count{kind="queue_payload"}`))
	require.GreaterOrEqual(t, sample(t, apiM, `capstan_dispatch_latency_seconds_count`), 4.0, "one per attempt")
	require.Positive(t, sample(t, apiM, `capstan_db_operation_duration_seconds_count{operation="CreateRun"}`))

	abortM := metricsOf(t, services["abort-reconciler"], "")
	require.Equal(t, 0.0, sample(t, abortM, `capstan_aborts_requested_total{kind="action"}`), "nothing was aborted")
	require.True(t, anyPositive(abortM, "capstan_db_operation_duration_seconds_count{"), "the resync's statements are timed")

	exM := metricsOf(t, services["executor"], s.MetricsToken)
	require.Equal(t, 0.0, sample(t, exM, `capstan_executor_attempts_held`))
	require.Positive(t, sample(t, exM, `capstan_executor_slots`))
}

// executorURL is the address the stack's one executor registered.
func executorURL(t *testing.T, s *Stack) string {
	t.Helper()
	resp, err := s.Client.ListWorkersWithResponse(context.Background())
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200)
	require.Len(t, resp.JSON200.Workers, 1)
	return strings.TrimSuffix(resp.JSON200.Workers[0].Address, "/")
}

// scrape GETs url with the bearer token ("" none): the api's operator pages
// want the admin's, the executor's /metrics its metrics token.
func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// metricsOf scrapes base's /metrics (with token, "" none) into series → value (the text
// format's "name{labels} value" lines).
func metricsOf(t *testing.T, base, token string) map[string]float64 {
	t.Helper()
	status, body := scrape(t, base+"/metrics", token)
	require.Equal(t, http.StatusOK, status, body)
	out := map[string]float64{}
	for line := range strings.SplitSeq(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// sample is series' value in m; the series must be there.
func sample(t *testing.T, m map[string]float64, series string) float64 {
	t.Helper()
	v, ok := m[series]
	require.True(t, ok, "series %s missing", series)
	return v
}

// value scrapes base and returns series' value, -1 when it is missing.
func value(t *testing.T, base, series string) float64 {
	t.Helper()
	if v, ok := metricsOf(t, base, "")[series]; ok {
		return v
	}
	return -1
}

// anyPositive reports whether a series of m whose name starts with prefix
// is above zero.
func anyPositive(m map[string]float64, prefix string) bool {
	for k, v := range m {
		if strings.HasPrefix(k, prefix) && v > 0 {
			return true
		}
	}
	return false
}
