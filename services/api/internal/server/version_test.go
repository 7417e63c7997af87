package server

import (
	"net/http"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionAnswersEveryRole: GET /v1/version answers the server's build
// to a token of each role, and 401 without one.
func TestVersionAnswersEveryRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := newAuthTokens(t, f.store)
	for _, secret := range []string{tok.reader, tok.writer, tok.worker, testAdminToken} {
		status, _, body := f.doAs(t, secret, http.MethodGet, "/v1/version", "")
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, runtime.Version(), body["go_version"])
		require.NotEmpty(t, body["version"])
		require.Contains(t, body, "commit")
	}
	status, _, _ := f.doAs(t, "", http.MethodGet, "/v1/version", "")
	require.Equal(t, http.StatusUnauthorized, status)
}
