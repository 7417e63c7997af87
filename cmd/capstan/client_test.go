package main

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// blackHole is an address that accepts connections and never answers.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// A request, and a stream's headers, to an API that never answers fail
// within --request-timeout with the hint to set the API's address (exit 3).
func TestUnansweredRequestsTimeOut(t *testing.T) {
	t.Parallel()
	hole := blackHole(t)
	for _, args := range [][]string{{"run", "get", "r1"}, {"run", "watch", "r1"}} {
		start := time.Now()
		_, err := capstan(hole, append([]string{"--request-timeout", "300ms"}, args...)...)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%q took %s, want about 300ms", args, took)
		}
		want := "cannot reach the Capstan API at " + hole + " (set CAPSTAN_API or --api): no answer within 300ms (--request-timeout)"
		if err == nil || message(err) != want || exitCode(err) != exitAPI {
			t.Errorf("%q: %v (exit %d), want %q (exit %d)", args, err, exitCode(err), want, exitAPI)
		}
	}
}

// A refused connection names the API and its cause.
func TestRefusedConnectionNamesTheAPI(t *testing.T) {
	t.Parallel()
	_, err := capstan("http://127.0.0.1:1", "workers")
	if msg := message(err); !strings.HasPrefix(msg, "cannot reach the Capstan API at http://127.0.0.1:1 (set CAPSTAN_API or --api): ") ||
		!strings.Contains(msg, "refused") {
		t.Errorf("got %q", msg)
	}
}

// version prints the CLI's build and the server's; an unreachable server
// still gets the CLI's part printed, and exit 3.
func TestVersion(t *testing.T) {
	t.Parallel()
	_, srv := newRoutes(t, map[string]reply{
		"GET /v1/version": {http.StatusOK, `{"version":"v9.9.9","commit":"abc","go_version":"go1.99"}`}})
	out, err := capstan(srv, "version")
	if err != nil || !strings.Contains(out, "client  ") || !strings.Contains(out, "server  v9.9.9   abc ") {
		t.Errorf("got %v:\n%s", err, out)
	}
	out, err = capstan("http://127.0.0.1:1", "version")
	if exitCode(err) != exitAPI || !strings.Contains(out, "client  ") || !strings.Contains(out, "server  unknown") {
		t.Errorf("unreachable: %v (exit %d):\n%s", err, exitCode(err), out)
	}
}

// A wait that outlives --timeout exits 4, apart from a run that ended in
// another phase (1).
func TestWaitTimeoutExits4(t *testing.T) {
	t.Parallel()
	_, running := newStandIn(t, http.StatusOK, "application/json", runJSON)
	_, err := capstan(running, "run", "wait", "r1", "--timeout", "300ms")
	if exitCode(err) != exitTimeout || !strings.Contains(err.Error(), "run r1 did not end in time (still RUNNING") {
		t.Errorf("got %v (exit %d), want exit %d", err, exitCode(err), exitTimeout)
	}
	failed := strings.Replace(strings.Replace(runJSON, `"RUNNING"`, `"FAILED"`, 1), `"actions":[]`,
		`"actions":[],"ended_at":"2026-01-01T00:00:01Z"`, 1)
	_, ended := newStandIn(t, http.StatusOK, "application/json", failed)
	_, err = capstan(ended, "run", "wait", "r1", "--timeout", "30s")
	if exitCode(err) != exitFailed {
		t.Errorf("a FAILED run: %v (exit %d), want exit %d", err, exitCode(err), exitFailed)
	}
}
