package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/services/executor/internal/server"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// /metrics serves the registry given; /readyz fails, naming why, while a
// dependency is down.
func TestMetricsAndReadyDependencies(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	sup, err := supervisor.New(&reports{}, supervisor.Config{DataDir: t.TempDir(), KillGrace: time.Second}, log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sup.Close(context.Background()) })
	s := server.New(sup, log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "capstan_test_gauge", Help: "h"},
		func() float64 { return 3 }))
	s.ServeMetrics(reg)
	var down error
	s.SetDependencies(func(context.Context) error { return down })
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	status, body := fetch(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "capstan_test_gauge 3")
	status, _ = fetch(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusOK, status)
	down = errors.New("redis: connection refused")
	status, body = fetch(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, "redis: connection refused")
}

func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, strings.TrimSpace(string(b))
}
