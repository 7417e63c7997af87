package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pagedRuns serves ListRuns: runs r0..r5, newest first, created an hour
// apart from now back, two to a page; it counts the pages it serves.
func pagedRuns(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	var pages atomic.Int32
	now := time.Now().UTC()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pages.Add(1)
		start := 0
		if c := r.URL.Query().Get("cursor"); c != "" {
			fmt.Sscan(c, &start)
		}
		var runs []map[string]any
		for i := start; i < min(start+2, 6); i++ {
			runs = append(runs, map[string]any{"project": "demo", "domain": "dev", "name": fmt.Sprintf("r%d", i),
				"phase": "SUCCEEDED", "created_at": now.Add(-time.Duration(i)*time.Hour - time.Minute),
				"updated_at": now, "ended_at": now.Add(-time.Duration(i)*time.Hour - 30*time.Second)})
		}
		page := map[string]any{"runs": runs}
		if start+2 < 6 {
			page["next_cursor"] = fmt.Sprint(start + 2)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &pages
}

// run list reads one page, or every page with --all, stops paging at
// --since, drops runs after --until, and prints -o name, table and wide.
func TestRunList(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args  []string
		want  string
		pages int32
	}{
		{[]string{"-o", "name", "run", "list"}, "r0\nr1\n", 1},
		{[]string{"-o", "name", "run", "list", "--all"}, "r0\nr1\nr2\nr3\nr4\nr5\n", 3},
		{[]string{"-o", "name", "run", "list", "--since", "150m"}, "r0\nr1\nr2\n", 2},
		{[]string{"-o", "name", "run", "list", "--all", "--until", "3h"}, "r3\nr4\nr5\n", 3},
		{[]string{"-o", "name", "run", "list", "--since", time.Now().Add(-90 * time.Minute).UTC().Format(time.RFC3339)}, "r0\nr1\n", 2},
	}
	for _, c := range cases {
		srv, pages := pagedRuns(t)
		out, err := capstan(srv, c.args...)
		if err != nil || out != c.want || pages.Load() != c.pages {
			t.Errorf("%q: %q, %d pages (%v), want %q, %d pages", c.args, out, pages.Load(), err, c.want, c.pages)
		}
	}
	srv, _ := pagedRuns(t)
	out, err := capstan(srv, "run", "list")
	if err != nil || !strings.HasPrefix(out, "RUN  PHASE      DURATION  AGE   MESSAGE\nr0   SUCCEEDED  30s       1m0s  -\n") {
		t.Errorf("table: %v\n%s", err, out)
	}
	out, err = capstan(srv, "-o", "wide", "run", "list")
	if err != nil || !strings.Contains(strings.SplitN(out, "\n", 2)[0], "MESSAGE  WORKFLOW  ORIGIN  CREATED") {
		t.Errorf("wide: %v\n%s", err, out)
	}
	out, err = capstan(srv, "-o", "jsonl", "run", "list")
	if err != nil || strings.Count(out, "\n") != 2 || !strings.HasPrefix(out, `{"created_at":`) {
		t.Errorf("jsonl: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"run", "list", "--since", "yesterday"}, {"-o", "wide", "workers"}} {
		if _, err := capstan(srv, args...); exitCode(err) != exitUsage {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// run list -w opens the project's stream from now (start=now) before it
// reads the list, so no change between the two is lost and no history is
// replayed; it prints a run an event names, and resumes a dropped stream
// after the last event id, not from now.
func TestRunListWatchOpensTheStreamFromNowFirst(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	streams := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/projects/demo/domains/dev/events":
			mu.Lock()
			streams++
			n := streams
			mu.Unlock()
			if n > 1 {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"type":"/problems/not_found","title":"Not Found","status":404,"code":"not_found"}`))
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("id: 7\nevent: run.created\ndata: {\"id\":7,\"run\":\"r9\",\"type\":\"run.created\"}\n\n"))
		case "/v1/projects/demo/domains/dev/runs":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"runs":[]}`))
		case "/v1/projects/demo/domains/dev/runs/r9":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(strings.Replace(runJSON, `"name":"r1"`, `"name":"r9"`, 1)))
		default:
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	t.Cleanup(srv.Close)
	out, err := capstan(srv.URL, "-o", "name", "run", "list", "-w")
	if exitCode(err) != exitAPI || !strings.HasPrefix(out, "r9\n") {
		t.Errorf("run list -w: %q, %v (exit %d)", out, err, exitCode(err))
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"/v1/projects/demo/domains/dev/events?start=now ", "/v1/projects/demo/domains/dev/runs?limit=50 ",
		"/v1/projects/demo/domains/dev/runs/r9? ", "/v1/projects/demo/domains/dev/events? 7"}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
