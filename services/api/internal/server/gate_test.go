package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnmatchedPathsNeedAToken: a path no operation of the spec matches is
// 401 without a token or with an unknown one, 404 (405 for a method another
// operation serves) with any valid one, whatever echo routes it to; only
// the probes and the dashboard's files answer without a token, and the
// operator routes need an admin.
func TestUnmatchedPathsNeedAToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := newAuthTokens(t, f.store)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/nothing-here"}, {http.MethodGet, "/v1/workers/"}, {http.MethodPost, "/nothing"},
		{http.MethodGet, "/favicon.ico"}, {http.MethodGet, "/v1/projects/pa/domains/dev/runs/r1/actions"},
		{http.MethodDelete, runsPath}, {http.MethodGet, "/debug/vars"}, {http.MethodPut, "/healthz/x"},
	} {
		name := c.method + " " + c.path
		for _, token := range []string{"", "cap_not-a-token"} {
			status, hdr, p := f.doAs(t, token, c.method, c.path, "")
			require.Equal(t, http.StatusUnauthorized, status, "%s with %q: %v", name, token, p)
			require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), name)
			require.Contains(t, hdr.Get("WWW-Authenticate"), "Bearer", name)
		}
		want := http.StatusNotFound
		if c.path == runsPath {
			want = http.StatusMethodNotAllowed
		}
		status, hdr, p := f.doAs(t, tok.reader, c.method, c.path, "")
		require.Equal(t, want, status, "%s with a reader: %v", name, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), name)
	}
	for _, path := range []string{"/healthz", "/readyz", "/ui/"} {
		status, _, _ := f.doAs(t, "", http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, status, path)
	}
	status, _, _ := f.doAs(t, "", http.MethodGet, "/", "")
	require.Equal(t, http.StatusOK, status, "/ redirects to the dashboard")
	for _, path := range []string{"/metrics", PprofPath + "/", PprofPath + "/cmdline"} {
		status, _, p := f.doAs(t, "", http.MethodGet, path, "")
		require.Equal(t, http.StatusUnauthorized, status, "%s: %v", path, p)
		status, _, p = f.doAs(t, tok.reader, http.MethodGet, path, "")
		require.Equal(t, http.StatusForbidden, status, "%s: %v", path, p)
		status, _, p = f.do(t, http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, status, "%s: %v", path, p)
	}
}
