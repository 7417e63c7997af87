package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// sseEvent is one server-sent event of an event stream.
type sseEvent struct {
	id   int64
	name string
	data string
}

// readSSE sends the events of body to the channel until it ends, then
// closes it.
func readSSE(body interface{ Read([]byte) (int, error) }) <-chan sseEvent {
	ch := make(chan sseEvent, 64)
	go func() {
		defer close(ch)
		var ev sseEvent
		sc := bufio.NewScanner(body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ": ")
			switch {
			case sc.Text() == "":
				if ev.name != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case k == "id":
				ev.id, _ = strconv.ParseInt(v, 10, 64)
			case k == "event":
				ev.name = v
			case k == "data":
				ev.data = v
			}
		}
	}()
	return ch
}

// watchRun opens the run's event stream after lastID (0: from the start).
func watchRun(ctx context.Context, s *Stack, run string, lastID int64) (*http.Response, error) {
	var params api.WatchRunEventsParams
	if lastID > 0 {
		params.LastEventID = ptr(strconv.FormatInt(lastID, 10))
	}
	return s.Client.WatchRunEvents(ctx, project, domain, run, &params)
}

// gatedSpec is one step that waits for the file dir/go, then a second.
func gatedSpec(dir string) api.WorkflowSpec {
	return api.WorkflowSpec{Steps: []api.Step{
		{Name: "wait", Command: ptr(fmt.Sprintf("while [ ! -f %s/go ]; do sleep 0.05; done", dir))},
		{Name: "after", Command: ptr("true")}}}
}

// storedEvents returns the run's run_events rows as "id type", in id order.
func storedEvents(t *testing.T, db *sql.DB, run string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT id, type FROM run_events WHERE project = $1 AND domain = $2 AND run_name = $3
		ORDER BY id`, project, domain, run)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int64
		var typ string
		require.NoError(t, rows.Scan(&id, &typ))
		out = append(out, fmt.Sprintf("%d %s", id, typ))
	}
	require.NoError(t, rows.Err())
	return out
}

// collect reads events until `end` (returned) or the stream closes, adding
// each as "id type" to got after checking its data is the RunEvent of it.
func collect(t *testing.T, events <-chan sseEvent, got *[]string, stop func(n int) bool) (end string) {
	t.Helper()
	for ev := range events {
		if ev.name == "end" {
			return ev.data
		}
		var re api.RunEvent
		require.NoError(t, json.Unmarshal([]byte(ev.data), &re), "data %q", ev.data)
		require.Equal(t, ev.id, re.Id)
		require.Equal(t, ev.name, re.Type)
		*got = append(*got, fmt.Sprintf("%d %s", re.Id, re.Type))
		if stop != nil && stop(len(*got)) {
			return ""
		}
	}
	return ""
}

// TestEventStreamResume: a watcher that disconnects mid-run and reconnects
// with Last-Event-ID, across a lost listener connection, ends with exactly
// the run's run_events rows, in order; so does the project's stream.
func TestEventStreamResume(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1})
	db := openDB(t, s)
	dir := s.SharedDir()
	name := create(t, s, gatedSpec(dir))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	all, err := s.Client.WatchEvents(ctx, project, domain, nil)
	require.NoError(t, err)
	defer all.Body.Close()
	allEvents := readSSE(all.Body)

	first, err := watchRun(ctx, s, name, 0)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, first.StatusCode)
	require.Equal(t, "text/event-stream", first.Header.Get("Content-Type"))
	var got []string
	require.Empty(t, collect(t, readSSE(first.Body), &got, func(n int) bool { return n == 2 }))
	first.Body.Close() // disconnect mid-run: the gate is still shut
	require.Len(t, got, 2)
	require.Nil(t, getRun(t, s, name).EndedAt)

	// The listener loses its connection; it reconnects and the watchers
	// re-read.
	_, err = db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, store.ListenerApplicationName)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))

	last, _ := strconv.ParseInt(strings.Fields(got[len(got)-1])[0], 10, 64)
	second, err := watchRun(ctx, s, name, last)
	require.NoError(t, err)
	defer second.Body.Close()
	end := collect(t, readSSE(second.Body), &got, nil)
	require.JSONEq(t, `{"phase": "SUCCEEDED"}`, end)
	require.Equal(t, storedEvents(t, db, name), got, "no gap, no duplicate")

	var proj []string
	want := storedEvents(t, db, name)
	collect(t, allEvents, &proj, func(n int) bool { return n == len(want) })
	require.Equal(t, want, proj, "the project's stream")

	resp, err := s.Client.WatchRunEventsWithResponse(ctx, project, domain, "no-such-run", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode())
	require.NotNil(t, resp.ApplicationproblemJSON404)
}

// TestEventStream500Watchers: 500 watchers of one run on one api process
// each get every event, in order, and the end. They share the admin token,
// which the api lets hold them all.
func TestEventStream500Watchers(t *testing.T) {
	const watchers = 500
	s := Start(t, bins, Options{Executors: 1, Env: []string{fmt.Sprintf("CAPSTAN_API_MAX_STREAMS_PER_TOKEN=%d", watchers)}})
	db := openDB(t, s)
	dir := s.SharedDir()
	name := create(t, s, gatedSpec(dir))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	apiPid := s.Proc("api").Cmd.Process.Pid
	cpuBefore := cpuSeconds(apiPid)
	var wg sync.WaitGroup
	var opened sync.WaitGroup
	results := make([][]string, watchers)
	ends := make([]string, watchers)
	errs := make(chan error, watchers)
	opened.Add(watchers)
	for i := range watchers {
		wg.Go(func() {
			resp, err := watchRun(ctx, s, name, 0)
			if err != nil {
				opened.Done()
				errs <- err
				return
			}
			defer resp.Body.Close()
			events := readSSE(resp.Body)
			ends[i] = collect(t, events, &results[i], func(n int) bool {
				if n == 1 {
					opened.Done()
				}
				return false
			})
		})
	}
	// Every watcher read the stored rows (collect's first callback) before
	// the gate opens: what follows comes live.
	opened.Wait()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	wg.Wait()
	t.Logf("the api used %.2f s of CPU (race build) for %d watchers", cpuSeconds(apiPid)-cpuBefore, watchers)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	want := storedEvents(t, db, name)
	for i := range watchers {
		require.JSONEq(t, `{"phase": "SUCCEEDED"}`, ends[i], "watcher %d", i)
		require.Equal(t, want, results[i], "watcher %d", i)
	}
}
