package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Each store sentinel, bare or wrapped, answers with its status, code and a
// detail about the request's subject; any other error is not a problem.
func TestProblemFor(t *testing.T) {
	t.Parallel()
	action := subject{kind: "action", name: "demo/dev/r1/a0"}
	cases := []struct {
		name   string
		err    error
		s      subject
		status int
		code   string
		detail string
		errs   []api.FieldError
	}{
		{"not found", store.ErrNotFound, subject{kind: "run", name: "r1"}, http.StatusNotFound, "not_found",
			"run r1 not found", nil},
		{"not found, kind only", store.ErrNotFound, subject{kind: "attempt"}, http.StatusNotFound, "not_found",
			"attempt not found", nil},
		{"not found, wrapped twice", fmt.Errorf("record abort of action demo/dev/r1/a0: %w",
			fmt.Errorf("run demo/dev/r1: %w", store.ErrNotFound)), action, http.StatusNotFound, "not_found",
			"action demo/dev/r1/a0 not found", nil},
		{"wrapped conflict", fmt.Errorf("%w: runs_pkey", store.ErrConflict),
			subject{kind: "run", name: "r1", in: "demo/dev"}, http.StatusConflict, "conflict",
			"a run named r1 already exists in demo/dev", nil},
		{"terminal", store.ErrTerminal, action, http.StatusConflict, "already_terminal",
			"action demo/dev/r1/a0 has already ended; nothing to abort", nil},
		{"bad report", store.ErrBadReport, subject{kind: "attempt", state: "RUNNING"}, http.StatusConflict,
			"conflict", "state RUNNING cannot follow the attempt's current state", nil},
		{"terminal, suspend", store.ErrTerminal, subject{kind: "run", name: "demo/dev/r1", op: "suspend"},
			http.StatusConflict, "already_terminal", "run demo/dev/r1 has already ended; nothing to suspend", nil},
		{"not waiting", domain.ErrNotWaiting, subject{kind: "action", name: "demo/dev/r1/b"}, http.StatusConflict,
			"not_waiting_for_approval", "action demo/dev/r1/b is not an approval step waiting for a decision", nil},
		{"not restartable", store.ErrNotRestartable, subject{kind: "run", name: "demo/dev/r1"}, http.StatusConflict,
			"not_restartable",
			"run demo/dev/r1 is not in a terminal failure phase (FAILED, ABORTED, TIMED_OUT, UNSCHEDULABLE, WORKER_FAILED)", nil},
		{"abort pending", store.ErrAbortPending, subject{kind: "run", name: "demo/dev/r1"}, http.StatusConflict,
			"abort_pending", "an abort of run demo/dev/r1 is still being delivered; restart it once delivered", nil},
		{"unknown step", store.ErrUnknownStep, subject{kind: "run", name: "demo/dev/r1"},
			http.StatusUnprocessableEntity, "invalid_request", "from_step: names no step of run demo/dev/r1",
			[]api.FieldError{{Field: "from_step", Message: "names no step of run demo/dev/r1"}}},
		{"not terminal", &store.NotTerminalError{Run: "r1-w-0", Phase: domain.PhaseRunning},
			subject{kind: "run", name: "demo/dev/r1", blocker: "run r1-w-0 is RUNNING"}, http.StatusConflict, "not_terminal",
			"run demo/dev/r1 cannot be deleted: run r1-w-0 is RUNNING; a run is deleted once it, its child runs and its parent run have ended", nil},
		{"bad cursor", store.ErrBadCursor, subject{}, http.StatusBadRequest, "invalid_request",
			"cursor: not a cursor from this API", []api.FieldError{{Field: "cursor", Message: "not a cursor from this API"}}},
	}
	for _, c := range cases {
		p, ok := problemFor(c.err, c.s)
		require.True(t, ok, c.name)
		require.Equal(t, c.status, p.Status, c.name)
		require.Equal(t, c.code, p.Code, c.name)
		require.Equal(t, "/problems/"+c.code, p.Type, c.name)
		require.Equal(t, c.detail, *p.Detail, c.name)
		if c.errs == nil {
			require.Nil(t, p.Errors, c.name)
		} else {
			require.Equal(t, c.errs, *p.Errors, c.name)
		}
	}
	for _, err := range []error{nil, errors.New("connection refused"), domain.ErrBadCause} {
		_, ok := problemFor(err, action)
		require.False(t, ok, "%v", err)
	}
}

// A store failure that is no sentinel answers 500 "internal error", and
// the one line the api logs of it says what the handler was doing, and to
// what: the run's key ahead of the database's own words. The store is
// closed under the server, as an outage would leave it.
func TestUnmappedStoreErrorIsLoggedWithContext(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	st := storetest.New(t)
	client := asynq.NewClient(redistest.New(t))
	t.Cleanup(func() { client.Close() })
	e := New(Deps{Store: st, Enqueuer: queue.NewEnqueuer(client, slog.New(slog.DiscardHandler)),
		Log: slog.New(slog.NewJSONHandler(&buf, nil)), Registry: prometheus.NewRegistry(),
		Ready: func(context.Context) error { return nil }}, Config{AdminToken: testAdminToken})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	f := &fixture{srv: srv, store: st}
	require.NoError(t, st.Close())

	status, _, p := f.do(t, http.MethodGet, runsPath+"/r1", "")
	require.Equal(t, http.StatusInternalServerError, status, p)
	require.Equal(t, "internal", p["code"])
	require.Equal(t, "internal error", p["detail"], "the cause stays in the log")
	var failed []string
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(l, &m))
		if m["msg"] == "request failed" {
			failed = append(failed, fmt.Sprint(m["err"]))
		}
	}
	require.Len(t, failed, 1)
	require.Regexp(t, `^read run demo/dev/r1: .+`, failed[0])
}
