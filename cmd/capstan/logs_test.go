package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// streamServer answers logs?follow=true with streams[i] on the i-th
// request, recording each request's Last-Event-ID.
func streamServer(t *testing.T, streams ...string) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var lastIDs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		i := len(lastIDs)
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		if r.URL.Query().Get("follow") != "true" || i >= len(streams) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"type":"about:blank","title":"Not Found","status":404,"code":"not_found","detail":"no such attempt"}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, streams[i])
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lastIDs...)
	}
}

// capstanSplit runs the CLI and returns its stdout and stderr apart.
func capstanSplit(api string, args ...string) (string, string, error) {
	root := newRoot()
	var out, errs bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errs)
	root.SetArgs(append([]string{"--api", api}, args...))
	err := root.Execute()
	return out.String(), errs.String(), err
}

func TestLogsFollowPrintsStreamsUntilEndAndResumes(t *testing.T) {
	t.Parallel()
	url, lastIDs := streamServer(t,
		": following\n\nid: 1\nevent: stdout\ndata: one\ndata: \n\nid: 2\nevent: stderr\ndata: oops\ndata: \n\n",
		"id: 7\nevent: stdout\ndata: two\ndata: \n\n: heartbeat\n\nevent: end\ndata: SUCCEEDED\n\nid: 9\nevent: stdout\ndata: after end\n\n")
	stdout, stderr, err := capstanSplit(url, "logs", "r1", "s", "--attempt", "1", "-f")
	if err != nil {
		t.Fatalf("logs -f: %v", err)
	}
	if stdout != "one\ntwo\n" || stderr != "oops\n" {
		t.Fatalf("stdout %q, stderr %q; want %q and %q", stdout, stderr, "one\ntwo\n", "oops\n")
	}
	if got := lastIDs(); len(got) != 2 || got[0] != "" || got[1] != "2" {
		t.Fatalf("Last-Event-ID per request %q; want a resume after 2", got)
	}
}

func TestLogsFollowShowsTheAPIsProblem(t *testing.T) {
	t.Parallel()
	url, _ := streamServer(t)
	_, _, err := capstanSplit(url, "logs", "r1", "s", "--attempt", "1", "-f")
	if err == nil || !strings.Contains(err.Error(), "no such attempt") {
		t.Fatalf("err %v; want the problem's detail", err)
	}
}

func TestReadEvents(t *testing.T) {
	t.Parallel()
	in := ": comment\r\nid: 3\r\nevent: stdout\r\ndata:a\r\ndata: b\r\n\r\ndata: plain\n\n\n"
	var got []sseEvent
	if err := readEvents(strings.NewReader(in), func(ev sseEvent) bool { got = append(got, ev); return false }); err != nil {
		t.Fatal(err)
	}
	want := []sseEvent{{id: "3", name: "stdout", data: "a\nb"}, {name: "message", data: "plain"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("events %+v; want %+v", got, want)
	}
}
