package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestWorkerLifecycleOverTheAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, w := f.do(t, http.MethodPost, "/v1/workers",
		`{"name": "exec-1", "address": "http://127.0.0.1:9001", "slots": 2, "resources": {"cpu_millis": 2000, "memory_bytes": 1073741824}}`)
	require.Equal(t, http.StatusCreated, status, w)
	id := w["id"].(string)
	require.Equal(t, false, w["draining"])
	require.Equal(t, map[string]any{}, w["failures"])

	status, _, reply := f.do(t, http.MethodPost, "/v1/workers/"+id+"/heartbeat",
		`{"draining": true, "attempts": [{"id": 42, "state": "RUNNING"}]}`)
	require.Equal(t, http.StatusOK, status, reply)
	require.Equal(t, []any{float64(42)}, reply["stop"], "an attempt unknown to the control plane is stopped")

	status, _, list := f.do(t, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusOK, status)
	ws := list["workers"].([]any)
	require.Len(t, ws, 1)
	got := ws[0].(map[string]any)
	require.Equal(t, true, got["draining"], "a draining executor is shown so")
	require.Equal(t, "alive", got["state"])
	require.Equal(t, map[string]any{}, got["failures"])
	require.NotContains(t, got, "last_failure_at")

	status, _, _ = f.do(t, http.MethodDelete, "/v1/workers/"+id, "")
	require.Equal(t, http.StatusNoContent, status)
	status, _, p := f.do(t, http.MethodPost, "/v1/workers/"+id+"/heartbeat", `{}`)
	require.Equal(t, http.StatusNotFound, status, "a deregistered worker must register again")
	require.Equal(t, "not_found", p["code"])
	status, _, _ = f.do(t, http.MethodDelete, "/v1/workers/"+id, "")
	require.Equal(t, http.StatusNotFound, status)
}

// TestWorkerStateShown: GET /v1/workers shows a worker alive while it
// heartbeats within the grace, unresponsive once silent past it until the
// scheduler's liveness pass declares it dead, then dead until its row is
// purged.
func TestWorkerStateShown(t *testing.T) {
	t.Parallel()
	now := time.Now()
	const grace = 5 * time.Second
	tests := []struct {
		name      string
		state     string
		heartbeat time.Time
		want      api.WorkerState
	}{
		{"heartbeating within the grace", store.WorkerAlive, now.Add(-grace), api.WorkerStateAlive},
		{"silent past the grace, not yet declared dead", store.WorkerAlive, now.Add(-grace - time.Millisecond),
			api.WorkerStateUnresponsive},
		{"declared dead", store.WorkerDead, now.Add(-time.Hour), api.WorkerStateDead},
		{"declared dead, its last beat within the grace", store.WorkerDead, now, api.WorkerStateDead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := store.WorkerLoad{Worker: store.Worker{State: tt.state, LastHeartbeatAt: tt.heartbeat}}
			require.Equal(t, tt.want, toWorker(w, grace, now).State)
		})
	}
}

// TestWorkerSandboxShown: GET /v1/workers shows the sandbox a worker
// registered with, "none" when it gave none; a sandbox that is not
// mechanisms joined with + is a 400.
func TestWorkerSandboxShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, w := f.do(t, http.MethodPost, "/v1/workers",
		`{"name": "boxed", "address": "http://127.0.0.1:9001", "sandbox": "uid+pidns+netns+rlimit"}`)
	require.Equal(t, http.StatusCreated, status, w)
	require.Equal(t, "uid+pidns+netns+rlimit", w["sandbox"])
	status, _, w = f.do(t, http.MethodPost, "/v1/workers", `{"name": "bare", "address": "http://127.0.0.1:9002"}`)
	require.Equal(t, http.StatusCreated, status, w)
	require.Equal(t, "none", w["sandbox"])
	status, _, p := f.do(t, http.MethodPost, "/v1/workers", `{"name": "odd", "address": "http://127.0.0.1:9003", "sandbox": "uid pidns"}`)
	require.Equal(t, http.StatusBadRequest, status, p)

	status, _, list := f.do(t, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusOK, status)
	got := map[string]any{}
	for _, w := range list["workers"].([]any) {
		got[w.(map[string]any)["name"].(string)] = w.(map[string]any)["sandbox"]
	}
	require.Equal(t, map[string]any{"boxed": "uid+pidns+netns+rlimit", "bare": "none"}, got)
}

// TestRegistrationAnswersTheWorkersSecrets: the registration answer, and
// nothing else, carries the worker's executor credential and dispatch
// key, derived from its id under the control-plane key; Postgres keeps the
// credential's SHA-256 only; GET /v1/workers shows neither; a second
// registration (another id) gets other secrets.
func TestRegistrationAnswersTheWorkersSecrets(t *testing.T) {
	t.Parallel()
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	f := newFixtureOn(t, st, Config{}, nil)
	register := func(name string) map[string]any {
		status, _, w := f.do(t, http.MethodPost, "/v1/workers", `{"name": "`+name+`", "address": "http://127.0.0.1:9001"}`)
		require.Equal(t, http.StatusCreated, status, w)
		return w
	}
	first, second := register("exec"), register("exec")
	id := first["id"].(string)
	credential := first["executor_credential"].(string)
	require.Equal(t, testControlPlaneKey.Credential(id), credential)
	require.Equal(t, workerkey.EncodeDispatchKey(testControlPlaneKey.DispatchKey(id)), first["dispatch_key"])
	require.NotEqual(t, credential, second["executor_credential"], "each registration its own")
	require.NotEqual(t, first["dispatch_key"], second["dispatch_key"])

	ws, err := f.store.Workers().ListWorkers(t.Context())
	require.NoError(t, err)
	require.Len(t, ws, 2)
	for _, w := range ws {
		require.Equal(t, workerkey.Digest(testControlPlaneKey.Credential(w.ID)), w.CredentialSHA256)
	}
	var row string
	require.NoError(t, db.QueryRow(`SELECT row_to_json(w)::text FROM workers w WHERE id = $1`, id).Scan(&row))
	require.NotContains(t, row, credential[len(workerkey.CredentialPrefix):], "the credential is not stored")

	list := f.raw(t, "/v1/workers")
	for _, w := range []map[string]any{first, second} {
		require.NotContains(t, list, w["executor_credential"].(string)[len(workerkey.CredentialPrefix):])
		require.NotContains(t, list, w["dispatch_key"].(string))
		require.NotContains(t, list, w["token"].(string))
	}
	require.NotContains(t, list, "executor_credential")
	require.NotContains(t, list, "dispatch_key")
}

// TestRegistrationNeedsTheControlPlaneKey: an api without the key
// registers no worker (it could give it no credential).
func TestRegistrationNeedsTheControlPlaneKey(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	client := asynq.NewClient(redistest.New(t))
	t.Cleanup(func() { client.Close() })
	e := New(Deps{Store: st, Enqueuer: queue.NewEnqueuer(client, slog.New(slog.DiscardHandler)),
		Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		Ready: func(context.Context) error { return nil }}, Config{AdminToken: testAdminToken})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	f := &fixture{srv: srv, store: st}
	status, _, p := f.do(t, http.MethodPost, "/v1/workers", `{"name": "exec", "address": "http://127.0.0.1:9001"}`)
	require.Equal(t, http.StatusInternalServerError, status, p)
	ws, err := st.Workers().ListWorkers(t.Context())
	require.NoError(t, err)
	require.Empty(t, ws)
}
