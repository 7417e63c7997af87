package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/store"
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
