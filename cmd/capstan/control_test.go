package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The CLI is tested against a stand-in for the API that records each
// request and answers a fixed body: the API's behaviour is tested against
// the real Postgres and Redis in services/api; here, what the commands send
// and how they render the answers.

// request is one request the stand-in received.
type request struct {
	method, path string
	body         map[string]any
	// auth is the Authorization header; query the URL's query.
	auth, query string
}

// standIn answers every request with status and body (or, for a "METHOD
// PATH" of routes, with its reply), and records it.
type standIn struct {
	mu       sync.Mutex
	requests []request
	status   int
	body     string
	ctype    string
	routes   map[string]reply
}

// reply is a stand-in's answer to one route: JSON for a 2xx status, else
// problem+json.
type reply struct {
	status int
	body   string
}

func newStandIn(t *testing.T, status int, ctype, body string) (*standIn, string) {
	t.Helper()
	return serveStandIn(t, &standIn{status: status, ctype: ctype, body: body})
}

// newRoutes is a stand-in that answers each route of routes with its reply
// and anything else 404.
func newRoutes(t *testing.T, routes map[string]reply) (*standIn, string) {
	t.Helper()
	return serveStandIn(t, &standIn{status: http.StatusNotFound, ctype: "application/problem+json",
		body:   `{"type":"/problems/not_found","title":"Not Found","status":404,"code":"not_found","detail":"no such route"}`,
		routes: routes})
}

func serveStandIn(t *testing.T, s *standIn) (*standIn, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var b map[string]any
		_ = json.Unmarshal(raw, &b)
		s.mu.Lock()
		s.requests = append(s.requests, request{method: r.Method, path: r.URL.Path, body: b, auth: r.Header.Get("Authorization"),
			query: r.URL.RawQuery})
		s.mu.Unlock()
		status, ctype, body := s.status, s.ctype, s.body
		if rp, ok := s.routes[r.Method+" "+r.URL.Path]; ok {
			status, ctype, body = rp.status, "application/json", rp.body
			if status >= 300 {
				ctype = "application/problem+json"
			}
		}
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func (s *standIn) received() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.requests...)
}

// capstan runs the CLI with args against api and returns what it printed.
func capstan(api string, args ...string) (string, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"--api", api}, args...))
	err := root.Execute()
	return out.String(), err
}

const (
	runJSON    = `{"project":"demo","domain":"dev","name":"r1","phase":"RUNNING","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","spec":{"steps":[]},"actions":[],"suspended":true}`
	actionJSON = `{"name":"gate","kind":"approval","phase":"PAUSED","tasks":[]}`
)

// Each command posts to its route with its body and prints one line.
func TestControlCommandsSendTheirRequests(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		answer,
		path string
		body map[string]any
		out  string
	}{
		{[]string{"run", "suspend", "r1"}, runJSON, "/v1/projects/demo/domains/dev/runs/r1/suspend",
			map[string]any{}, "suspend of r1 accepted (phase RUNNING)\n"},
		{[]string{"run", "resume", "r1", "-p", "team", "-d", "prod"}, runJSON,
			"/v1/projects/team/domains/prod/runs/r1/resume", map[string]any{}, "resume of r1 accepted (phase RUNNING)\n"},
		{[]string{"run", "restart", "r1"}, runJSON, "/v1/projects/demo/domains/dev/runs/r1/restart",
			map[string]any{}, "restart of r1 accepted: every step that did not succeed runs again\n"},
		{[]string{"run", "restart", "r1", "--from-step", "build"}, runJSON,
			"/v1/projects/demo/domains/dev/runs/r1/restart", map[string]any{"from_step": "build"},
			"restart of r1 accepted: step build and what follows it runs again\n"},
		{[]string{"approve", "r1", "gate", "--comment", "ship it", "--by", "ann"}, actionJSON,
			"/v1/projects/demo/domains/dev/runs/r1/actions/gate/approve",
			map[string]any{"comment": "ship it", "by": "ann"}, "step gate of r1 approved\n"},
		{[]string{"reject", "r1", "gate"}, actionJSON, "/v1/projects/demo/domains/dev/runs/r1/actions/gate/reject",
			map[string]any{}, "step gate of r1 rejected\n"},
	}
	for _, c := range cases {
		s, api := newStandIn(t, http.StatusAccepted, "application/json", c.answer)
		out, err := capstan(api, c.args...)
		name := strings.Join(c.args, " ")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if out != c.out {
			t.Errorf("%s: printed %q, want %q", name, out, c.out)
		}
		got := s.received()
		if len(got) != 1 || got[0].method != http.MethodPost || got[0].path != c.path {
			t.Fatalf("%s: requests %+v, want one POST %s", name, got, c.path)
		}
		if !equalJSON(got[0].body, c.body) {
			t.Errorf("%s: body %v, want %v", name, got[0].body, c.body)
		}
	}
}

func equalJSON(a, b map[string]any) bool {
	ra, _ := json.Marshal(a)
	rb, _ := json.Marshal(b)
	return bytes.Equal(ra, rb)
}

// run delete sends a DELETE of the run and prints the runs deleted.
func TestRunDeleteSendsItsRequest(t *testing.T) {
	t.Parallel()
	s, api := newStandIn(t, http.StatusOK, "application/json", `{"deleted":["r1","r1-w-0"]}`)
	out, err := capstan(api, "run", "delete", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if out != "deleted r1, r1-w-0\n" {
		t.Errorf("printed %q", out)
	}
	got := s.received()
	if len(got) != 1 || got[0].method != http.MethodDelete || got[0].path != "/v1/projects/demo/domains/dev/runs/r1" {
		t.Fatalf("requests %+v, want one DELETE of the run", got)
	}
}

// run get --archived reads the run from the archive's route and prints it
// as run get prints a live one; a run not archived is the api's problem.
func TestRunGetArchived(t *testing.T) {
	t.Parallel()
	ended := strings.Replace(runJSON, `"RUNNING"`, `"SUCCEEDED"`, 1)
	s, api := newRoutes(t, map[string]reply{
		"GET /v1/projects/demo/domains/dev/runs/r1":          {http.StatusOK, ended},
		"GET /v1/projects/demo/domains/dev/archived-runs/r1": {http.StatusOK, ended}})
	live, err := capstan(api, "run", "get", "r1")
	if err != nil {
		t.Fatal(err)
	}
	archived, err := capstan(api, "run", "get", "--archived", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if archived != live || !strings.HasPrefix(archived, "run demo/dev/r1  SUCCEEDED") {
		t.Errorf("printed %q, want what run get prints: %q", archived, live)
	}
	if got := s.received(); len(got) != 2 || got[1].path != "/v1/projects/demo/domains/dev/archived-runs/r1" {
		t.Fatalf("requests %+v, want the archived run's GET last", got)
	}
	_, err = capstan(api, "run", "get", "--archived", "r2")
	if want := "404 not_found: no such route"; err == nil || err.Error() != want {
		t.Errorf("run get --archived r2: error %v, want %q", err, want)
	}
}

// Wrong arguments fail before any request is sent.
func TestControlCommandsCheckArguments(t *testing.T) {
	t.Parallel()
	s, api := newStandIn(t, http.StatusAccepted, "application/json", runJSON)
	for _, args := range [][]string{
		{"run", "suspend"}, {"run", "delete"}, {"run", "resume", "a", "b"}, {"run", "restart"}, {"run", "restart", "r1", "--from"},
		{"approve", "r1"}, {"reject", "r1", "gate", "extra"}, {"approve", "r1", "gate", "--reason", "x"},
	} {
		if _, err := capstan(api, args...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	if got := s.received(); len(got) != 0 {
		t.Errorf("requests sent: %+v", got)
	}
}

// A problem answer is one line naming the status, the code and the detail,
// and the command fails (main exits 1).
func TestControlCommandsShowProblems(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args   []string
		status int
		code   string
		want   string
	}{
		{[]string{"approve", "r1", "build"}, http.StatusConflict, "not_waiting_for_approval",
			"409 not_waiting_for_approval: action demo/dev/r1/build is not an approval step waiting for a decision"},
		{[]string{"run", "restart", "r1"}, http.StatusConflict, "not_restartable",
			"409 not_restartable: run demo/dev/r1 is not in a terminal failure phase"},
		{[]string{"run", "delete", "r1"}, http.StatusConflict, "not_terminal",
			"409 not_terminal: run demo/dev/r1 cannot be deleted: run r1 is RUNNING"},
		{[]string{"run", "suspend", "ghost"}, http.StatusNotFound, "not_found", "404 not_found: run demo/dev/ghost not found"},
	}
	for _, c := range cases {
		detail := strings.TrimPrefix(c.want, c.want[:strings.Index(c.want, ": ")+2])
		body, _ := json.Marshal(map[string]any{"type": "/problems/" + c.code, "title": http.StatusText(c.status),
			"status": c.status, "code": c.code, "detail": detail})
		_, api := newStandIn(t, c.status, "application/problem+json", string(body))
		_, err := capstan(api, c.args...)
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: error %v, want %q", c.args, err, c.want)
		}
	}
	_, api := newStandIn(t, http.StatusUnprocessableEntity, "application/problem+json",
		`{"type":"/problems/invalid_request","title":"Unprocessable Entity","status":422,"code":"invalid_request",`+
			`"detail":"from_step: names no step of run demo/dev/r1","errors":[{"field":"from_step","message":"names no step of run demo/dev/r1"}]}`)
	_, err := capstan(api, "run", "restart", "r1", "--from-step", "zz")
	if want := "422 invalid_request: from_step: names no step of run demo/dev/r1"; err == nil || err.Error() != want {
		t.Errorf("restart --from-step zz: error %v, want %q", err, want)
	}
}
