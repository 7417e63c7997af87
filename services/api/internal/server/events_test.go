package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

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
	return newFeedFixtureConfig(t, Config{})
}

// newFeedFixtureConfig is newFeedFixture with the server's config.
func newFeedFixtureConfig(t *testing.T, cfg Config) *fixture {
	t.Helper()
	cfg.AdminToken = testAdminToken
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
		Ready: func(context.Context) error { return nil }, Feed: hub}, cfg)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &fixture{srv: srv, store: st, redis: rdb, url: url}
}

// sql opens the fixture's database (newFeedFixture) for statements a test
// makes itself.
func (f *fixture) sql(t *testing.T) *sql.DB {
	t.Helper()
	require.NotEmpty(t, f.url, "a fixture of newFeedFixture")
	db, err := sql.Open("pgx", f.url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
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

// A project's stream with start=now sends no stored event, only what
// commits after it opened; start=first, the default, sends them all, and
// Last-Event-ID wins over start.
func TestWatchEventsStartNow(t *testing.T) {
	t.Parallel()
	f := newFeedFixture(t)
	project := "/v1/projects/demo/domains/dev/events"
	status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"before","spec":{"steps":[{"name":"s","command":"x"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	stored := next(t, f.stream(t, project, ""))
	require.Equal(t, "run.created", stored.event)
	require.Equal(t, stored, next(t, f.stream(t, project+"?start=first", "")), "start=first is the default")

	now := f.stream(t, project+"?start=now", "")
	resumed := f.stream(t, project+"?start=now", stored.id)
	plain := f.stream(t, project, stored.id)
	status, _, body = f.do(t, http.MethodPost, runsPath, `{"name":"after","spec":{"steps":[{"name":"s","command":"x"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	first := next(t, now)
	var re map[string]any
	require.NoError(t, json.Unmarshal([]byte(first.data), &re))
	require.Equal(t, "after", re["run"], "start=now sends the run created after it opened first, not the stored one: %+v", first)
	require.Equal(t, "run.created", first.event)
	require.Equal(t, next(t, plain), next(t, resumed), "Last-Event-ID wins over start=now")

	status, _, p := f.do(t, http.MethodGet, project+"?start=later", "")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "invalid_request", p["code"])
}

// jsonID renders a JSON number id as the SSE id field does.
func jsonID(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

// A stream resumed with Last-Event-ID sends every later event once, in id
// order, when they fall in two day partitions and their created_at does
// not follow their ids: one run's stream and its domain's alike.
func TestEventStreamsResumeAcrossPartitions(t *testing.T) {
	t.Parallel()
	f := newFeedFixture(t)
	db := f.sql(t)
	status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"days","spec":{"steps":[{"name":"s","command":"x"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	yesterday := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	_, err := f.store.History().EnsurePartitions(context.Background(), yesterday, 2)
	require.NoError(t, err)
	var created string
	require.NoError(t, db.QueryRow(`SELECT max(id)::text FROM run_events WHERE run_name = 'days'`).Scan(&created))
	var want []sseEvent
	for i, at := range []time.Time{yesterday.Add(23 * time.Hour), yesterday.Add(24*time.Hour + time.Minute),
		yesterday.Add(23*time.Hour + 30*time.Minute), yesterday.Add(25 * time.Hour)} {
		var id int64
		typ := fmt.Sprint("test.e", i)
		require.NoError(t, db.QueryRow(`INSERT INTO run_events (project, domain, run_name, type, created_at)
			VALUES ('demo', 'dev', 'days', $1, $2) RETURNING id`, typ, at).Scan(&id))
		want = append(want, sseEvent{id: fmt.Sprint(id), event: typ})
	}
	var homes int
	require.NoError(t, db.QueryRow(`SELECT count(DISTINCT tableoid) FROM run_events WHERE type LIKE 'test.e%'`).Scan(&homes))
	require.Equal(t, 2, homes, "the events are in two partitions")

	for _, path := range []string{runsPath + "/days/events", "/v1/projects/demo/domains/dev/events"} {
		for from, after := range []string{created, want[1].id} {
			events := f.stream(t, path, after)
			var got []sseEvent
			for range want[from*2:] {
				ev := next(t, events)
				got = append(got, sseEvent{id: ev.id, event: ev.event})
			}
			require.Equal(t, want[from*2:], got, "%s after %s", path, after)
		}
	}
}
