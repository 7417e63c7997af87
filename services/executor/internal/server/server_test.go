package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/executorapi"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/capstan-run/capstan/services/executor/internal/server"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { proctest.Main(m) }

// reports records what the supervisor reports and always says proceed.
type reports struct {
	mu   sync.Mutex
	byID map[int64][]workerapi.AttemptReport
}

func (r *reports) Report(_ context.Context, id int64, reps ...workerapi.AttemptReport) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[int64][]workerapi.AttemptReport{}
	}
	r.byID[id] = append(r.byID[id], reps...)
	return true, nil
}

func (r *reports) Submit(ctx context.Context, id int64, rep workerapi.AttemptReport) func() (bool, error) {
	proceed, err := r.Report(ctx, id, rep)
	return func() (bool, error) { return proceed, err }
}

func (r *reports) find(id int64, st api.TaskState) *workerapi.AttemptReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range r.byID[id] {
		if rep.State == st {
			return &rep
		}
	}
	return nil
}

type fixture struct {
	sup    *supervisor.Supervisor
	rec    *reports
	url    string
	client *executorapi.ClientWithResponses
	// credential is what the server's Guard reads as the current
	// registration's executor credential: testCredential at first.
	credential *atomic.Pointer[string]
}

func setup(t *testing.T) fixture {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := &reports{}
	sup, err := supervisor.New(rec, supervisor.Config{DataDir: t.TempDir(), KillGrace: time.Second}, log)
	require.NoError(t, err)
	es := server.New(sup, log)
	credential := new(atomic.Pointer[string])
	credential.Store(ptr(testCredential))
	es.Guard(func() string { return *credential.Load() }, testMetricsToken)
	es.ServeMetrics(prometheus.NewRegistry())
	srv := httptest.NewServer(es.Handler())
	client, err := executorapi.NewClientWithResponses(srv.URL, executorapi.WithRequestEditorFn(
		func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+testCredential)
			return nil
		}))
	require.NoError(t, err)
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, sup.Close(context.Background()))
	})
	return fixture{sup: sup, rec: rec, url: srv.URL, client: client, credential: credential}
}

func requireProblem(t *testing.T, status int, code string, res *http.Response, body []byte) {
	t.Helper()
	require.Equal(t, status, res.StatusCode, "%s", body)
	require.Equal(t, problem.ContentType, res.Header.Get("Content-Type"))
	var p problem.Problem
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, code, p.Code)
	require.Equal(t, status, p.Status)
}

// testCredential is the fixture's executor credential, and
// testMetricsToken its CAPSTAN_EXECUTOR_METRICS_TOKEN.
const (
	testCredential   = "capx_credential-0123456789abcdef0123456789abcdef"
	testMetricsToken = "metrics-0123456789abcdef0123456789abcdef"
)

func ptr[T any](v T) *T { return &v }

// status sends method path with Authorization auth ("" none) and returns
// the answer's status, checking that a 401 is a problem.
func (f fixture) status(t *testing.T, method, path, auth string) int {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode == http.StatusUnauthorized {
		requireProblem(t, http.StatusUnauthorized, problem.CodeUnauthorized, res, body)
	}
	return res.StatusCode
}

// TestAbortNeedsTheWorkersCredential: an abort without the worker's
// current executor credential — none, another secret, the metrics token,
// another scheme, a credential the worker no longer has — is 401 and the
// attempt keeps running; /metrics takes the metrics token alone; health
// stays open.
func TestAbortNeedsTheWorkersCredential(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.sup.Start(workerapi.AttemptSpec{Id: 8, Number: 1, Project: "p", Domain: "d", Run: "r",
		Action: "a", Replicas: 1, Plugin: "shell", Command: "sleep 600", Proceed: true}))
	require.Eventually(t, func() bool { return f.rec.find(8, api.TaskStateRUNNING) != nil }, 10*time.Second, 5*time.Millisecond)
	const abort = "/v1/attempts/8/abort"
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Bearer " + testMetricsToken,
		"Basic " + testCredential, testCredential} {
		require.Equal(t, http.StatusUnauthorized, f.status(t, http.MethodPost, abort, auth), "%q", auth)
	}
	require.Equal(t, http.StatusUnauthorized, f.status(t, http.MethodGet, "/metrics", ""))
	require.Equal(t, http.StatusUnauthorized, f.status(t, http.MethodGet, "/metrics", "Bearer "+testCredential),
		"metrics are the operator's")
	require.Equal(t, http.StatusOK, f.status(t, http.MethodGet, "/metrics", "Bearer "+testMetricsToken))
	require.Equal(t, http.StatusOK, f.status(t, http.MethodGet, "/healthz", ""))

	f.credential.Store(ptr("capx_rotated-0123456789abcdef0123456789abcdef")) // registered again
	require.Equal(t, http.StatusUnauthorized, f.status(t, http.MethodPost, abort, "Bearer "+testCredential),
		"the credential of a former registration opens nothing")
	f.credential.Store(ptr("")) // no registration
	require.Equal(t, http.StatusUnauthorized, f.status(t, http.MethodPost, abort, "Bearer "))
	require.Nil(t, f.rec.find(8, api.TaskStateKILLED), "the attempt still runs")

	f.credential.Store(ptr(testCredential))
	abortRes, err := f.client.AbortAttemptWithResponse(context.Background(), 8, executorapi.AbortAttemptJSONRequestBody{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, abortRes.StatusCode(), "%s", abortRes.Body)
}

// The abort of an attempt this executor does not hold is the documented
// 404 attempt_not_found, what the abort reconciler takes as already gone.
func TestAbortUnknownAttemptIs404(t *testing.T) {
	t.Parallel()
	f := setup(t)
	res, err := f.client.AbortAttemptWithResponse(context.Background(), 99, executorapi.AbortAttemptJSONRequestBody{})
	require.NoError(t, err)
	requireProblem(t, http.StatusNotFound, problem.CodeAttemptNotFound, res.HTTPResponse, res.Body)
	require.NotNil(t, res.ApplicationproblemJSON404)
}

func TestAbortRunningAttemptKillsIt(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.sup.Start(workerapi.AttemptSpec{Id: 7, Number: 1, Project: "p", Domain: "d", Run: "r",
		Action: "a", Replicas: 1, Plugin: "shell", Command: "sleep 600", Proceed: true}))
	var pid int
	require.Eventually(t, func() bool {
		rep := f.rec.find(7, api.TaskStateRUNNING)
		if rep != nil {
			pid = *rep.Pid
		}
		return rep != nil
	}, 10*time.Second, 5*time.Millisecond)

	cause, reason := "timeout", "ran past its deadline"
	res, err := f.client.AbortAttemptWithResponse(context.Background(), 7,
		executorapi.AbortAttemptJSONRequestBody{Cause: &cause, Reason: &reason})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), "%s", res.Body)
	require.Equal(t, int64(7), res.JSON200.Id)
	require.True(t, res.JSON200.Killed)
	require.True(t, proctest.Gone(pid), "the process is gone when the abort answers")

	require.Eventually(t, func() bool { return f.rec.find(7, api.TaskStateKILLED) != nil }, 10*time.Second, 5*time.Millisecond)
	killed := f.rec.find(7, api.TaskStateKILLED)
	require.Equal(t, workerapi.Timeout, *killed.Cause)
	require.Equal(t, reason, *killed.Error)
}

func TestAbortRejectsUnknownCause(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cause := "bored"
	res, err := f.client.AbortAttemptWithResponse(context.Background(), 7, executorapi.AbortAttemptJSONRequestBody{Cause: &cause})
	require.NoError(t, err)
	requireProblem(t, http.StatusBadRequest, problem.CodeInvalid, res.HTTPResponse, res.Body)
}

func TestErrorsAreProblems(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"no route", http.MethodGet, "/v1/nothing", "", http.StatusNotFound, problem.CodeNotFound},
		{"bad id", http.MethodPost, "/v1/attempts/abc/abort", "{}", http.StatusBadRequest, problem.CodeBadRequest},
		{"bad body", http.MethodPost, "/v1/attempts/1/abort", "{", http.StatusBadRequest, problem.CodeBadRequest},
		{"wrong method", http.MethodGet, "/v1/attempts/1/abort", "", http.StatusMethodNotAllowed, problem.CodeNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tt.method, f.url+tt.path, strings.NewReader(tt.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testCredential)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			requireProblem(t, tt.status, tt.code, res, body)
		})
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	f := setup(t)
	res, err := http.Get(f.url + "/healthz")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	f := setup(t)
	status := func() int {
		res, err := http.Get(f.url + "/readyz")
		require.NoError(t, err)
		defer res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusOK, status(), "ready while it takes attempts")
	require.NoError(t, f.sup.Drain(context.Background()))
	require.Equal(t, http.StatusServiceUnavailable, status(), "not ready once draining")
}
