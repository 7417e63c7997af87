package plugin_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/stretchr/testify/require"
)

// allowing is the http plugin whose CAPSTAN_HTTP_ALLOW is list.
func allowing(t *testing.T, list string) *plugin.HTTP {
	t.Helper()
	allow, err := plugin.ParseHTTPAllow(list)
	require.NoError(t, err)
	return &plugin.HTTP{Allow: allow}
}

// counting is a server on 127.0.0.1 that answers 200 and counts the
// requests it got.
func counting(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, _ *http.Request) { n.Add(1) }))
	t.Cleanup(srv.Close)
	return srv, &n
}

// requireRefused checks that tr is the user failure of a refused target
// that names target.
func requireRefused(t *testing.T, tr plugin.Transition, target, kind string) {
	t.Helper()
	require.Equal(t, plugin.PhaseRetryableFailure, tr.Phase, "cause user")
	require.Equal(t, plugin.CodeHTTPTargetRefused, tr.Code)
	require.Contains(t, tr.Err, "refused to connect to "+target)
	require.Contains(t, tr.Err, "a "+kind+" address")
	require.Contains(t, tr.Err, "CAPSTAN_HTTP_ALLOW")
}

// TestHTTPRefusesLinkLocal: the cloud metadata endpoint and any other
// link-local address, IPv4 or IPv6 (an IPv4-mapped one as its IPv4), are
// refused even when loopback is allowed.
func TestHTTPRefusesLinkLocal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, target string }{
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254:80"},
		{"http://169.254.10.1:8080/", "169.254.10.1:8080"},
		{"http://[fe80::1]/", "[fe80::1]:80"},
		{"http://[::ffff:169.254.169.254]/", "::ffff:169.254.169.254 (169.254.169.254:80)"},
	} {
		t.Run(c.url, func(t *testing.T) {
			t.Parallel()
			tr, err := until(t, allowing(t, "127.0.0.0/8, ::1"), httpTask(t, domain.HTTPSpec{URL: c.url}))
			require.NoError(t, err)
			requireRefused(t, tr, c.target, "link-local")
		})
	}
}

// TestHTTPLoopbackNeedsTheAllowList: a loopback target — by address or by
// a name that resolves to it — is refused, the server never asked, unless
// the allow list names its range or the name.
func TestHTTPLoopbackNeedsTheAllowList(t *testing.T) {
	t.Parallel()
	srv, hits := counting(t)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	port := u.Port()
	byName := "http://localhost:" + port + "/"

	tr, err := until(t, &plugin.HTTP{}, httpTask(t, domain.HTTPSpec{URL: srv.URL}))
	require.NoError(t, err)
	requireRefused(t, tr, "127.0.0.1:"+port, "loopback")
	tr, err = until(t, allowing(t, "10.0.0.0/8,169.254.169.254"), httpTask(t, domain.HTTPSpec{URL: byName}))
	require.NoError(t, err)
	require.Equal(t, plugin.CodeHTTPTargetRefused, tr.Code, "the address dialed is checked, not the URL's text")
	require.Contains(t, tr.Err, "refused to connect to localhost (")
	require.Zero(t, hits.Load(), "a refused target gets no request")

	for _, list := range []string{"127.0.0.0/8,::1/128", "127.0.0.1", "localhost"} {
		tr, err = until(t, allowing(t, list), httpTask(t, domain.HTTPSpec{URL: byName}))
		require.NoError(t, err)
		require.Equal(t, plugin.PhaseSuccess, tr.Phase, "allowed by %q: %s", list, tr.Err)
	}
	require.Equal(t, int32(3), hits.Load())
}

// TestHTTPRedirectsAreCheckedAndCapped: a redirect's target is checked as
// the first one is, and the sixth redirect fails the attempt.
func TestHTTPRedirectsAreCheckedAndCapped(t *testing.T) {
	t.Parallel()
	// /chain/n redirects to /chain/n-1; /chain/0 answers 200.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/chain/")); {
		case r.URL.Path == "/metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case n > 0:
			http.Redirect(w, r, "/chain/"+strconv.Itoa(n-1), http.StatusFound)
		}
	}))
	t.Cleanup(srv.Close)
	h := loopbackHTTP(t)

	tr, err := until(t, h, httpTask(t, domain.HTTPSpec{URL: srv.URL + "/metadata"}))
	require.NoError(t, err)
	requireRefused(t, tr, "169.254.169.254:80", "link-local")

	tr, err = until(t, h, httpTask(t, domain.HTTPSpec{URL: srv.URL + "/chain/" + strconv.Itoa(plugin.MaxHTTPRedirects)}))
	require.NoError(t, err)
	require.Equal(t, plugin.PhaseSuccess, tr.Phase, "five redirects are followed: %s", tr.Err)

	tr, err = until(t, h, httpTask(t, domain.HTTPSpec{URL: srv.URL + "/chain/" + strconv.Itoa(plugin.MaxHTTPRedirects+1)}))
	require.NoError(t, err)
	require.Equal(t, plugin.PhaseRetryableFailure, tr.Phase)
	require.Equal(t, plugin.CodeHTTPTooManyRedirects, tr.Code)
	require.Contains(t, tr.Err, "stopped after 5 redirects")
}

// TestHTTPTimeout: a request without an answer fails with HTTPTimeout at
// the task's Timeout, else at the plugin's.
func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(srv.Close)

	task := httpTask(t, domain.HTTPSpec{URL: srv.URL})
	task.Timeout = 50 * time.Millisecond
	start := time.Now()
	tr, err := until(t, loopbackHTTP(t), task)
	require.NoError(t, err)
	require.Equal(t, plugin.PhaseRetryableFailure, tr.Phase)
	require.Equal(t, plugin.CodeHTTPTimeout, tr.Code)
	require.Contains(t, tr.Err, "no answer within 50ms")
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)

	h := loopbackHTTP(t)
	h.Timeout = 80 * time.Millisecond
	tr, err = until(t, h, httpTask(t, domain.HTTPSpec{URL: srv.URL}))
	require.NoError(t, err)
	require.Equal(t, plugin.CodeHTTPTimeout, tr.Code)
	require.Contains(t, tr.Err, "no answer within 80ms")
}

// TestParseHTTPAllow: CIDRs, addresses and host names, blanks ignored;
// anything else is an error naming the item.
func TestParseHTTPAllow(t *testing.T) {
	t.Parallel()
	_, err := plugin.ParseHTTPAllow("")
	require.NoError(t, err)
	_, err = plugin.ParseHTTPAllow(" 127.0.0.1/8 , ::1, fe80::/10, metadata.internal ,")
	require.NoError(t, err)
	for _, bad := range []string{"127.0.0.1/33", "10.0.0.0/x", "http://x", "a_b", "-x.org"} {
		_, err = plugin.ParseHTTPAllow(bad)
		require.ErrorContains(t, err, strconv.Quote(bad), bad)
	}
}
