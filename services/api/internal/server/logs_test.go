package server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/stretchr/testify/require"
)

// logsRun creates a one-step run, starts its task and returns its attempt id
// and the path of its logs.
func logsRun(t *testing.T, f *fixture, name string) (int64, string) {
	t.Helper()
	status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"`+name+`","spec":{"steps":[{"name":"s","command":"x"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	ids := startTasks(t, f, domain.RunKey{Project: "demo", Domain: "dev", Run: name}, "s")
	return ids["s"][0], runsPath + "/" + name + "/actions/s/tasks/0/attempts/1/logs"
}

// appendLogs posts chunks, {"stream":…,"data":…} each, and expects want.
func (f *fixture) appendLogs(t *testing.T, id int64, want int, chunks ...string) map[string]any {
	t.Helper()
	status, _, p := f.do(t, http.MethodPost, fmt.Sprintf("/v1/attempts/%d/logs", id),
		`{"chunks":[`+strings.Join(chunks, ",")+`]}`)
	require.Equal(t, want, status, p)
	return p
}

func TestAppendAttemptLogsStoresChunksReadAsJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, path := logsRun(t, f, "logs-json")

	f.report(t, id, `{"state":"RUNNING"}`)
	status, _, logs := f.do(t, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, status, logs)
	require.Equal(t, map[string]any{"stdout": "", "stderr": "", "truncated": false}, logs, "nothing shipped yet")

	f.appendLogs(t, id, http.StatusNoContent, `{"stream":"stdout","data":"one\n"}`, `{"stream":"stderr","data":"oops\n"}`)
	f.appendLogs(t, id, http.StatusNoContent, `{"stream":"stdout","data":"two\n"}`)
	status, _, logs = f.do(t, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, status, logs)
	require.Equal(t, map[string]any{"stdout": "one\ntwo\n", "stderr": "oops\n", "truncated": false}, logs)

	f.report(t, id, `{"state":"SUCCEEDED","exit_code":0,"stdout":"tail only\n"}`)
	status, _, logs = f.do(t, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, status, logs)
	require.Equal(t, "one\ntwo\n", logs["stdout"], "the shipped chunks win over the final report's tail")
}

func TestAppendAttemptLogsRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, _ := logsRun(t, f, "logs-bad")
	cases := []struct{ name, chunk string }{
		{"unknown stream", `{"stream":"stdin","data":"x"}`},
		{"NUL", `{"stream":"stdout","data":"a\u0000b"}`},
		{"no data", `{"stream":"stdout"}`},
	}
	for _, c := range cases {
		p := f.appendLogs(t, id, http.StatusBadRequest, c.chunk)
		require.Equal(t, "invalid_request", p["code"], "%s: %v", c.name, p)
	}
	p := f.appendLogs(t, id+1000, http.StatusNotFound, `{"stream":"stdout","data":"x"}`)
	require.Equal(t, "not_found", p["code"], p)
}

func TestAppendAttemptLogsBoundsWhatIsKept(t *testing.T) {
	t.Parallel()
	f := newFixtureConfig(t, Config{LogMaxBytes: 10})
	id, path := logsRun(t, f, "logs-bound")

	f.appendLogs(t, id, http.StatusNoContent, `{"stream":"stdout","data":"aaaa\n"}`, `{"stream":"stderr","data":"e\n"}`)
	f.appendLogs(t, id, http.StatusNoContent, `{"stream":"stdout","data":"bbbb\n"}`)
	status, _, logs := f.do(t, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, status, logs)
	require.Equal(t, map[string]any{"stdout": "[capstan: 5 bytes of older stdout dropped]\nbbbb\n", "stderr": "e\n",
		"truncated": true}, logs, "12 bytes past a bound of 10: the oldest chunk went")
}

// sseEvent is one server-sent event as a test reads it.
type sseEvent struct{ id, event, data string }

// readEvents reads events from a stream into a channel until it ends.
func readEvents(t *testing.T, resp *http.Response) <-chan sseEvent {
	t.Helper()
	ch := make(chan sseEvent, 64)
	go func() {
		defer close(ch)
		var ev sseEvent
		var data []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			k, v, _ := strings.Cut(line, ": ")
			switch {
			case line == "":
				if ev.event != "" {
					ev.data = strings.Join(data, "\n")
					ch <- ev
				}
				ev, data = sseEvent{}, nil
			case k == "id":
				ev.id = v
			case k == "event":
				ev.event = v
			case k == "data":
				data = append(data, v)
			}
		}
	}()
	return ch
}

// next returns the next event within 10s.
func next(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "the stream ended early")
		return ev
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no event within 10s")
	}
	return sseEvent{}
}

// follow opens path with follow=true added to its query, resuming after
// lastID when set.
func (f *fixture) follow(t *testing.T, path, lastID string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+path+sep+"follow=true", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return resp
}

// A follower streams the chunks stored, then each chunk as it is shipped,
// then `end` once the attempt ended, woken by the api's LISTEN connection:
// its fallback poll is an hour.
func TestFollowStreamsChunksUntilTheAttemptEnds(t *testing.T) {
	t.Parallel()
	f := newFeedFixtureConfig(t, Config{LogPollInterval: time.Hour})
	id, path := logsRun(t, f, "logs-follow")
	f.report(t, id, `{"state":"RUNNING"}`)
	f.appendLogs(t, id, http.StatusNoContent, `{"stream":"stdout","data":"one\ntwo\n"}`)

	events := readEvents(t, f.follow(t, path, ""))
	first := next(t, events)
	require.Equal(t, sseEvent{id: first.id, event: "stdout", data: "one\ntwo\n"}, first)
	f.appendLogs(t, id, http.StatusNoContent, `{"stream":"stderr","data":"bad\r\n"}`)
	require.Equal(t, "stderr bad\n", func() string { ev := next(t, events); return ev.event + " " + ev.data }(),
		"a chunk shipped while following arrives; CR LF becomes a line break")
	f.report(t, id, `{"state":"FAILED","exit_code":1}`)
	end := next(t, events)
	require.Equal(t, "end", end.event)
	require.Equal(t, "FAILED", end.data)
	closes(t, events, "the stream closes after end")

	resumed := readEvents(t, f.follow(t, path, first.id))
	require.Equal(t, "stderr", next(t, resumed).event, "Last-Event-ID resumes after that chunk")
	require.Equal(t, "end", next(t, resumed).event, "an ended attempt ends the stream at once")
}

// With timestamps=true each chunk's text starts with the time it was
// stored, in UTC with nanoseconds, and a space; the final report's output
// of an attempt that shipped no chunk carries its report's time.
func TestFollowWithTimestamps(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, path := logsRun(t, f, "logs-stamped")
	f.report(t, id, `{"state":"RUNNING"}`)
	before := time.Now().Add(-time.Minute)
	f.appendLogs(t, id, http.StatusNoContent, `{"stream":"stdout","data":"one\ntwo\n"}`)
	f.report(t, id, `{"state":"SUCCEEDED","exit_code":0}`)

	stamped := func(ev sseEvent, text string) {
		t.Helper()
		at, rest, ok := strings.Cut(ev.data, " ")
		require.True(t, ok, ev.data)
		require.Len(t, at, len(logTime), "fixed width: %s", at)
		tm, err := time.Parse(time.RFC3339Nano, at)
		require.NoError(t, err)
		require.True(t, tm.After(before) && tm.Before(time.Now().Add(time.Minute)), "%s is the chunk's time", tm)
		require.Equal(t, text, rest)
	}
	events := readEvents(t, f.follow(t, path+"?timestamps=true", ""))
	stamped(next(t, events), "one\ntwo\n")
	require.Equal(t, "end", next(t, events).event)
	plain := readEvents(t, f.follow(t, path, ""))
	require.Equal(t, "one\ntwo\n", next(t, plain).data, "without timestamps the text is as shipped")

	id2, path2 := logsRun(t, f, "logs-stamped-final")
	f.report(t, id2, `{"state":"FAILED","exit_code":1,"stderr":"only at the end\n"}`)
	final := readEvents(t, f.follow(t, path2+"?timestamps=true", ""))
	ev := next(t, final)
	require.Equal(t, "stderr", ev.event)
	stamped(ev, "only at the end\n")
}

func TestFollowEndsWithoutEndAtItsBoundAndOnShutdown(t *testing.T) {
	t.Parallel()
	stopping := make(chan struct{})
	f := newFixtureStopping(t, Config{LogFollowMax: 300 * time.Millisecond}, stopping)
	id, path := logsRun(t, f, "logs-bounded")
	f.report(t, id, `{"state":"RUNNING"}`)

	closes(t, readEvents(t, f.follow(t, path, "")), "past LogFollowMax the stream closes without end")

	f2 := newFixtureStopping(t, Config{}, stopping)
	id2, path2 := logsRun(t, f2, "logs-stopping")
	f2.report(t, id2, `{"state":"RUNNING"}`)
	f2.appendLogs(t, id2, http.StatusNoContent, `{"stream":"stdout","data":"x"}`)
	stream := readEvents(t, f2.follow(t, path2, ""))
	require.Equal(t, "stdout", next(t, stream).event)
	close(stopping)
	closes(t, stream, "an api shutting down closes the stream without end")
}

// closes requires ch to close, with no event first, within 10s.
func closes(t *testing.T, ch <-chan sseEvent, msg string) {
	t.Helper()
	select {
	case ev, open := <-ch:
		require.False(t, open, "%s: got %+v", msg, ev)
	case <-time.After(10 * time.Second):
		require.FailNow(t, msg)
	}
}

func TestFollowAnAttemptThatShippedNothingSendsItsFinalOutput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, path := logsRun(t, f, "logs-final")
	f.report(t, id, `{"state":"RUNNING"}`)
	f.report(t, id, `{"state":"SUCCEEDED","exit_code":0,"stdout":"kept tail\n","stderr":"e"}`)
	events := readEvents(t, f.follow(t, path, ""))
	require.Equal(t, sseEvent{event: "stdout", data: "kept tail\n"}, next(t, events))
	require.Equal(t, sseEvent{event: "stderr", data: "e"}, next(t, events))
	require.Equal(t, sseEvent{event: "end", data: "SUCCEEDED"}, next(t, events))
	closes(t, events, "the stream closes after end")
}

// An attempt's chunks in two day partitions read back whole, in order, as
// JSON and as a stream resumed after the older one.
func TestLogsReadAcrossPartitions(t *testing.T) {
	t.Parallel()
	f := newFeedFixture(t)
	id, path := logsRun(t, f, "logs-days")
	f.report(t, id, `{"state":"RUNNING"}`)
	yesterday := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	_, err := f.store.History().EnsurePartitions(context.Background(), yesterday, 2)
	require.NoError(t, err)
	var seq string
	require.NoError(t, f.sql(t).QueryRow(`INSERT INTO attempt_log_chunks (attempt_id, stream, data, byte_offset, created_at)
		VALUES ($1, 'stdout', $2, 0, $3) RETURNING seq::text`, id, "one\n", yesterday.Add(23*time.Hour)).Scan(&seq))
	f.appendLogs(t, id, http.StatusNoContent, `{"stream":"stdout","data":"two\n"}`, `{"stream":"stderr","data":"e\n"}`)

	status, _, logs := f.do(t, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, status, logs)
	require.Equal(t, map[string]any{"stdout": "one\ntwo\n", "stderr": "e\n", "truncated": false}, logs)
	events := readEvents(t, f.follow(t, path, ""))
	require.Equal(t, sseEvent{id: seq, event: "stdout", data: "one\n"}, next(t, events))
	require.Equal(t, "stdout two\n", func() string { ev := next(t, events); return ev.event + " " + ev.data }())
	resumed := readEvents(t, f.follow(t, path, seq))
	require.Equal(t, "stdout two\n", func() string { ev := next(t, resumed); return ev.event + " " + ev.data }(),
		"Last-Event-ID resumes after yesterday's chunk")
	require.Equal(t, "stderr", next(t, resumed).event)
}
