package e2e

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// receivedSpan is one span an OTLP receiver got: its service, name and
// trace id (hex).
type receivedSpan struct {
	Service, Name, TraceID string
}

// otlpReceiver is a minimal OTLP/HTTP protobuf trace receiver: it keeps
// every span posted to /v1/traces.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []receivedSpan
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var msg coltrace.ExportTraceServiceRequest
	if err != nil || req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &msg) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{service, s.GetName(), hex.EncodeToString(s.GetTraceId())})
			}
		}
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(b)
}

// services returns the services that sent a span of trace id.
func (r *otlpReceiver) services(id string) map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for _, s := range r.spans {
		if s.TraceID == id {
			out[s.Service] = append(out[s.Service], s.Name)
		}
	}
	return out
}

// traceOf returns the trace id of the api's span named name, "" if none.
func (r *otlpReceiver) traceOf(service, name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.Service == service && s.Name == name {
			return s.TraceID
		}
	}
	return ""
}

// TestOneTraceFromAPIToExecutor: the real services export to an OTLP
// receiver; the run's create request, the scheduler's handling of it and
// the placement of its attempts, and the executor's run of them are spans
// of one trace; so are an abort request and its delivery.
func TestOneTraceFromAPIToExecutor(t *testing.T) {
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	s := Start(t, bins, Options{Executors: 1, Env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + srv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=100"}})
	var spec api.WorkflowSpec
	require.NoError(t, yaml.UnmarshalStrict([]byte(`steps: [{name: a, command: "echo a"}, {name: b, command: "echo b"}]`), &spec))
	name := create(t, s, spec)
	waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)

	const createRoute = "POST /v1/projects/:project/domains/:domain/runs" // otelecho's span name: method and route
	t.Cleanup(func() {
		if t.Failed() {
			rcv.mu.Lock()
			t.Logf("spans received: %+v", rcv.spans)
			rcv.mu.Unlock()
		}
	})
	var id string
	s.Eventually(10*time.Second, "the create request's span", func() bool {
		id = rcv.traceOf("capstan-api", createRoute)
		return id != ""
	})
	s.Eventually(10*time.Second, "the scheduler's and the executor's spans in the run's trace", func() bool {
		got := rcv.services(id)
		return len(got["capstan-scheduler"]) > 0 && len(got["capstan-executor"]) > 0
	})
	got := rcv.services(id)
	require.Contains(t, got["capstan-scheduler"], "asynq run:start")
	require.Contains(t, got["capstan-scheduler"], "dispatch attempts")
	require.Contains(t, got["capstan-executor"], "asynq attempt:run")
	require.Contains(t, got["capstan-api"], "POST /v1/workers/:id/reports", "the executor's reports continue it")

	// An abort's trace: the api's request and the reconciler's delivery
	// (whose call to the executor joins it too, unless the executor's
	// heartbeat learnt of the abort first and the call finds it gone).
	require.NoError(t, yaml.UnmarshalStrict([]byte(`steps: [{name: sleep, command: "sleep 600"}]`), &spec))
	long := create(t, s, spec)
	waitStep(t, s, long, "sleep", 30*time.Second, api.PhaseRUNNING)
	abortRun(t, s, long, "trace it")
	waitOutcome(t, s, long, 30*time.Second, "delivered")
	s.Eventually(10*time.Second, "the abort request's span", func() bool {
		id = rcv.traceOf("capstan-api", "POST /v1/projects/:project/domains/:domain/runs/:run/abort")
		return id != ""
	})
	s.Eventually(10*time.Second, "the reconciler's span in the abort's trace", func() bool {
		return slices.Contains(rcv.services(id)["capstan-abort-reconciler"], "asynq action:abort")
	})
}
