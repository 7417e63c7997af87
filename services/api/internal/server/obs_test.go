package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The api's /metrics carries the payload sizes it saw (a spec, a log
// chunk, outputs) and the dispatch latency of an attempt that reported
// RUNNING; /queues/ serves the queue UI it is given.
func TestMetricsPayloadsDispatchAndQueueUI(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	client := asynq.NewClient(redistest.New(t))
	t.Cleanup(func() { client.Close() })
	queues := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "queues "+r.URL.Path) })
	e := New(Deps{Store: st, Enqueuer: queue.NewEnqueuer(client, slog.New(slog.DiscardHandler)),
		Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		Ready: func(context.Context) error { return nil }, Queues: queues}, Config{AdminToken: testAdminToken})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	f := &controlFixture{fixture: &fixture{srv: srv, store: st}}

	status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"r1","spec":{"steps":[{"name":"a","command":"true"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: "r1"}
	storetest.StartSteps(t, st, key, "a")
	id := f.assignA(t, key)
	f.report(t, id, `{"state":"RUNNING"}`)
	f.report(t, id, `{"state":"SUCCEEDED","exit_code":0,"outputs":{"X":"1"}}`)

	metrics := get(t, srv.URL+"/metrics")
	for _, want := range []string{
		`capstan_payload_size_bytes_count{kind="spec"} 1`,
		`capstan_payload_size_bytes_count{kind="outputs"} 1`,
		`capstan_payload_size_bytes_count{kind="queue_payload"} 2`,
		`capstan_dispatch_latency_seconds_count 1`,
	} {
		require.Contains(t, metrics, want)
	}
	require.Equal(t, "queues /queues/", get(t, srv.URL+"/queues/"))
	require.Contains(t, get(t, srv.URL+"/debug/pprof/"), "goroutine")
}

func get(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testAdminToken) // operator pages are the admin's
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}
