package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestRateLimitIsPerToken: past its burst a token gets 429 problem+json
// with Retry-After (the seconds until its bucket holds a request again),
// while another token still passes.
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
	require.Equal(t, "application/problem+json", hdr.Get("Content-Type"))
	retry, err := strconv.Atoi(hdr.Get("Retry-After"))
	require.NoError(t, err)
	require.InDelta(t, 1000, retry, 1, "a request every 1000 s")
	status, _, p = f.doAs(t, tok.writer, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusOK, status, p)
}

// TestRandomTokensShareTheirAddressBucket: requests without a token the
// api holds in memory (none, random ones, a valid one not yet looked up)
// pay their address's bucket before any lookup: past it, 429 with
// Retry-After and a problem, and no statement. A token the api remembers,
// and the probes, pass.
func TestRandomTokensShareTheirAddressBucket(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := newFixtureOn(t, storetest.New(t), Config{IPRateLimit: 0.001, IPRateBurst: 6}, nil,
		func(d *Deps) { d.Registry = reg })
	tok := newAuthTokens(t, f.store)
	status, _, p := f.doAs(t, tok.reader, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusOK, status, p)
	for i := range 5 {
		status, _, p := f.doAs(t, fmt.Sprintf("cap_random-%d", i), http.MethodGet, "/v1/workers", "")
		require.Equal(t, http.StatusUnauthorized, status, p)
	}
	for _, token := range []string{"cap_random-5", "cap_random-0", "", tok.writer} {
		status, hdr, p := f.doAs(t, token, http.MethodGet, "/v1/workers", "")
		require.Equal(t, http.StatusTooManyRequests, status, "%q: %v", token, p)
		require.Equal(t, "rate_limited", p["code"])
		require.NotEmpty(t, hdr.Get("Retry-After"))
	}
	require.Equal(t, 5.0, counterValue(t, reg, "capstan_api_token_lookups_total", "unknown"),
		"no lookup past the bucket")
	for _, token := range []string{tok.reader, testAdminToken} {
		status, _, p := f.doAs(t, token, http.MethodGet, "/v1/workers", "")
		require.Equal(t, http.StatusOK, status, "a token the api remembers pays its own bucket: %v", p)
	}
	status, _, _ = f.doAs(t, "", http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusOK, status)
}

// TestAddressBucketsTrustOnlyTheConfiguredProxies: without trusted
// proxies X-Forwarded-For is ignored, so a client cannot buy fresh
// buckets by writing it; behind a trusted proxy each forwarded client has
// its own.
func TestAddressBucketsTrustOnlyTheConfiguredProxies(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	for _, trusted := range []bool{false, true} {
		cfg := Config{IPRateLimit: 0.001, IPRateBurst: 1}
		if trusted {
			cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}
		f := newFixtureOn(t, st, cfg, nil)
		send := func(forwarded string) int {
			req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/workers", nil)
			require.NoError(t, err)
			req.Header.Set("X-Forwarded-For", forwarded)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			return resp.StatusCode
		}
		require.Equal(t, http.StatusUnauthorized, send("203.0.113.1"))
		require.Equal(t, http.StatusTooManyRequests, send("203.0.113.1"))
		want := http.StatusTooManyRequests
		if trusted {
			want = http.StatusUnauthorized
		}
		require.Equal(t, want, send("203.0.113.2"), "another forwarded client, trusted: %v", trusted)
	}
}

// TestIPExtractor: the client address is the peer unless the peer is a
// trusted proxy; then the rightmost X-Forwarded-For entry no trusted proxy
// holds.
func TestIPExtractor(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32")}
	for _, c := range []struct {
		proxies      []netip.Prefix
		peer, xff    string
		want, reason string
	}{
		{nil, "10.1.1.1:5000", "203.0.113.9", "10.1.1.1", "no trusted proxy: the peer"},
		{trusted, "10.1.1.1:5000", "203.0.113.9", "203.0.113.9", "a trusted peer forwards"},
		{trusted, "10.1.1.1:5000", "198.51.100.1, 203.0.113.9, 192.0.2.7", "203.0.113.9", "rightmost untrusted"},
		{trusted, "198.51.100.4:5000", "203.0.113.9", "198.51.100.4", "an untrusted peer's header is ignored"},
		{trusted, "127.0.0.1:5000", "203.0.113.9", "127.0.0.1", "loopback is not trusted unless configured"},
		{trusted, "10.1.1.1:5000", "", "10.1.1.1", "no header: the peer"},
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = c.peer
		if c.xff != "" {
			req.Header.Set("X-Forwarded-For", c.xff)
		}
		require.Equal(t, c.want, ipExtractor(c.proxies)(req), c.reason)
	}
}

// TestAddressKey: an IPv6 client is counted by its /64, an IPv4 one by its
// address.
func TestAddressKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "2001:db8:1:2::/64", addressKey("2001:db8:1:2:aaaa::1"))
	require.Equal(t, addressKey("2001:db8:1:2::1"), addressKey("2001:db8:1:2:ffff:ffff:ffff:ffff"))
	require.NotEqual(t, addressKey("2001:db8:1:2::1"), addressKey("2001:db8:1:3::1"))
	require.Equal(t, "203.0.113.9", addressKey("203.0.113.9"))
	require.Equal(t, "::ffff:203.0.113.9", addressKey("::ffff:203.0.113.9"))
	require.Empty(t, addressKey(""))
}

// TestBucketsWait: an empty bucket charges nothing and says how long until
// it holds a request again; it refills at its rate.
func TestBucketsWait(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	b := newBuckets(2, 2)
	b.now = func() time.Time { return now }
	for range 2 {
		ok, _ := b.take("a")
		require.True(t, ok)
	}
	for range 3 {
		ok, wait := b.take("a")
		require.False(t, ok)
		require.Equal(t, 500*time.Millisecond, wait, "a denial charges nothing")
	}
	ok, _ := b.take("b")
	require.True(t, ok, "another key has its own bucket")
	now = now.Add(500 * time.Millisecond)
	ok, _ = b.take("a")
	require.True(t, ok)
}

// counterValue reads the counter name{result} from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
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
