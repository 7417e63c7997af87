package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestRateLimitIsPerToken: past its burst a token gets 429 problem+json
// with Retry-After, while another token still passes.
func TestRateLimitIsPerToken(t *testing.T) {
	t.Parallel()
	f := newFixtureConfig(t, Config{RateLimit: 0.001, RateBurst: 3})
	tok := newAuthTokens(t, f.store)
	for range 3 {
		status, _, p := f.doAs(t, tok.reader, http.MethodGet, "/v1/workers", "")
		require.Equal(t, http.StatusOK, status, p)
	}
	status, hdr, p := f.doAs(t, tok.reader, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusTooManyRequests, status, p)
	require.Equal(t, "rate_limited", p["code"])
	require.Equal(t, "1", hdr.Get("Retry-After"))
	status, _, p = f.doAs(t, tok.writer, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusOK, status, p)
}

// TestCrossSiteFormPostCannotAbort: a browser form posted from another site
// (no Authorization header, a form content type, or no body at all) is
// refused 401 and the run is not aborted.
func TestCrossSiteFormPostCannotAbort(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, p := f.do(t, http.MethodPost, runsPath, `{"name":"r1","spec":{"steps":[{"name":"a","command":"true"}]}}`)
	require.Equal(t, http.StatusCreated, status, p)
	for _, ctype := range []string{"", "application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x"} {
		req, err := http.NewRequest(http.MethodPost, f.srv.URL+runsPath+"/r1/abort", nil)
		require.NoError(t, err)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		req.Header.Set("Origin", "https://evil.example")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, ctype)
	}
	status, _, run := f.do(t, http.MethodGet, runsPath+"/r1", "")
	require.Equal(t, http.StatusOK, status)
	require.NotEqual(t, "ABORTED", run["phase"])
}

// TestAccessLogLinePerRequest: one "request" line per request with its
// request id (also answered as X-Request-Id) and token id, never the secret.
func TestAccessLogLinePerRequest(t *testing.T) {
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
	_, hdr, _ := f.do(t, http.MethodGet, "/v1/workers", "")
	require.NotEmpty(t, hdr.Get("X-Request-Id"))
	var line map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(l, &m))
		if m["msg"] == "request" {
			require.Nil(t, line, "one line per request")
			line = m
		}
	}
	require.NotNil(t, line)
	require.Equal(t, hdr.Get("X-Request-Id"), line["request_id"])
	require.Equal(t, "admin", line["token"])
	require.EqualValues(t, 200, line["status"])
	require.NotContains(t, buf.String(), testAdminToken)
	require.False(t, strings.Contains(buf.String(), "Bearer"))
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

func (s *syncBuffer) String() string { return string(s.Bytes()) }
