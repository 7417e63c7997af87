package plugin_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/stretchr/testify/require"
)

// loopbackHTTP is the http plugin allowed to reach httptest's servers on
// 127.0.0.1.
func loopbackHTTP(t *testing.T) *plugin.HTTP {
	t.Helper()
	allow, err := plugin.ParseHTTPAllow("127.0.0.0/8")
	require.NoError(t, err)
	return &plugin.HTTP{Allow: allow}
}

func httpTask(t *testing.T, h domain.HTTPSpec, outputs ...string) *plugin.Task {
	t.Helper()
	dir := t.TempDir()
	return &plugin.Task{ID: 1, Spec: domain.PluginSpec{Plugin: domain.PluginHTTP, HTTP: &h}, Dir: dir, OutputsDir: dir,
		Outputs: outputs}
}

// TestHTTPRequestAndBodyOutput: the request goes out with its method,
// headers and body; a 2xx succeeds and the body becomes the output "body".
func TestHTTPRequestAndBodyOutput(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+r.Header.Get("X-Token")+" "+string(b))
	}))
	defer srv.Close()
	task := httpTask(t, domain.HTTPSpec{URL: srv.URL, Method: "POST", Headers: map[string]string{"X-Token": "t1"},
		Body: "payload"}, "body")
	tr, err := until(t, loopbackHTTP(t), task)
	require.NoError(t, err)
	require.Equal(t, plugin.PhaseSuccess, tr.Phase)
	require.Nil(t, tr.ExitCode, "no process ran")
	require.Equal(t, "POST t1 payload", string(tr.Stdout))
	require.Contains(t, string(tr.Stderr), "200 OK")
	body, err := os.ReadFile(filepath.Join(task.OutputsDir, "body"))
	require.NoError(t, err)
	require.Equal(t, "POST t1 payload", string(body))
}

// TestHTTPBodyIsBounded: only the first 64 KiB of a body are kept.
func TestHTTPBodyIsBounded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", plugin.MaxHTTPBody+10))
	}))
	defer srv.Close()
	tr, err := until(t, loopbackHTTP(t), httpTask(t, domain.HTTPSpec{URL: srv.URL}, "body"))
	require.NoError(t, err)
	require.Len(t, tr.Stdout, plugin.MaxHTTPBody)
	require.True(t, tr.Truncated)
}

// TestHTTPAbortCancelsTheRequest: Abort cancels a request in flight and
// returns once it has returned.
func TestHTTPAbortCancelsTheRequest(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	}))
	defer srv.Close()
	h, task := loopbackHTTP(t), httpTask(t, domain.HTTPSpec{URL: srv.URL})
	tr, err := h.Handle(context.Background(), task)
	require.NoError(t, err)
	require.Equal(t, plugin.PhaseRunning, tr.Phase)
	<-arrived
	require.NoError(t, h.Abort(context.Background(), task))
	tr, err = until(t, h, task)
	require.NoError(t, err)
	require.Equal(t, plugin.PhaseRetryableFailure, tr.Phase)
	require.Contains(t, tr.Err, "context canceled")
	require.NoError(t, h.Finalize(context.Background(), task))
}
