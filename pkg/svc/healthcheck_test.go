package svc

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProbe: a 200 from /readyz is ready, a 503 is not (with its body),
// an unspecified host is asked on loopback, and an address without a
// fixed port or nobody listening is an error.
func TestProbe(t *testing.T) {
	t.Parallel()
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !ready.Load() {
			http.Error(w, "postgres: connection refused", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	ctx := context.Background()

	err = Probe(ctx, srv.Listener.Addr().String())
	require.ErrorContains(t, err, "503")
	require.ErrorContains(t, err, "postgres: connection refused")
	var out bytes.Buffer
	require.Equal(t, 1, ProbeExit(srv.Listener.Addr().String(), &out))
	require.Contains(t, out.String(), "not ready")

	ready.Store(true)
	require.NoError(t, Probe(ctx, srv.Listener.Addr().String()))
	require.NoError(t, Probe(ctx, ":"+port), "an empty host is loopback")
	require.NoError(t, Probe(ctx, "0.0.0.0:"+port), "so is an unspecified one")
	require.Equal(t, 0, ProbeExit(srv.Listener.Addr().String(), &out))

	require.ErrorContains(t, Probe(ctx, "127.0.0.1:0"), "no fixed port")
	require.ErrorContains(t, Probe(ctx, "nonsense"), "listen address")
	srv.Close()
	require.Error(t, Probe(ctx, srv.Listener.Addr().String()), "nobody listening")
}
