package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/capstan-run/capstan/services/api/internal/feed"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// newFeedFixture is newFixture with a feed hub listening on its database.
func newFeedFixture(t *testing.T) *fixture {
	t.Helper()
	url := storetest.NewURL(t)
	st, err := store.Open(context.Background(), url, store.Config{MaxOpenConns: 8})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	rdb := redistest.New(t)
	client := asynq.NewClient(rdb)
	t.Cleanup(func() { client.Close() })
	log := slog.New(slog.DiscardHandler)
	hub := feed.New(url, 0, 0, log)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = hub.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	e := New(Deps{Store: st, Enqueuer: queue.NewEnqueuer(client, log), Log: log, Registry: prometheus.NewRegistry(),
		Ready: func(context.Context) error { return nil }, Feed: hub}, Config{AdminToken: testAdminToken})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &fixture{srv: srv, store: st, redis: rdb}
}

// stream opens path (an events stream), with Last-Event-ID lastID when set.
func (f *fixture) stream(t *testing.T, path, lastID string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+path, nil)
	require.NoError(t, err)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return readEvents(t, resp)
}

// A run's stream sends its stored events, then live ones, then `end` once
// the run is terminal; Last-Event-ID (header or query) resumes after an
// event; the project's stream has the same events.
func TestWatchRunEventsStoredLiveEndAndResume(t *testing.T) {
	t.Parallel()
	f := newFeedFixture(t)
	status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"ev","spec":{"steps":[{"name":"s","command":"x"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	path := runsPath + "/ev/events"

	events := f.stream(t, path, "")
	project := f.stream(t, "/v1/projects/demo/domains/dev/events", "")
	first := next(t, events)
	require.Equal(t, "run.created", first.event)
	var re map[string]any
	require.NoError(t, json.Unmarshal([]byte(first.data), &re))
	require.Equal(t, first.id, jsonID(re["id"]))
	require.Equal(t, "ev", re["run"])
	require.Equal(t, "a0", re["action"])
	require.Contains(t, re, "data")
	require.Equal(t, first, next(t, project))

	status, _, body = f.do(t, http.MethodPost, runsPath+"/ev/abort", `{}`)
	require.Equal(t, http.StatusAccepted, status, body)
	var live []sseEvent
	for ev := next(t, events); ev.event != "end"; ev = next(t, events) {
		live = append(live, ev)
	}
	require.NotEmpty(t, live, "the abort's events arrive live")
	closes(t, events, "the stream closes after end")
	for _, want := range live {
		require.Equal(t, want, next(t, project))
	}

	resumed := f.stream(t, path, first.id)
	require.Equal(t, live[0], next(t, resumed), "Last-Event-ID resumes after that event")
	byQuery := f.stream(t, path+"?last_event_id="+live[len(live)-1].id, "")
	end := next(t, byQuery)
	require.Equal(t, sseEvent{event: "end", data: `{"phase":"ABORTED"}`}, end, "an ended run's stream ends at once")

	status, _, p := f.do(t, http.MethodGet, runsPath+"/ghost/events", "")
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "not_found", p["code"])
	status, _, _ = f.do(t, http.MethodGet, path+"?last_event_id=-1", "")
	require.Equal(t, http.StatusBadRequest, status)
}

// jsonID renders a JSON number id as the SSE id field does.
func jsonID(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}
