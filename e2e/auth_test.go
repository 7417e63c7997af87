package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// TestAuthAcrossTheStack: on the real services, the api refuses a request
// without a token (401) and a scoped token's view of another project
// (404); an executor's abort API refuses a call without its worker's
// executor credential (any other token: 401); and the executors, which
// registered with the worker token, ran the admin's run to SUCCEEDED.
func TestAuthAcrossTheStack(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 1})
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "a", Command: ptr("echo ok")}}})
	s.Eventually(30*time.Second, "run succeeded", func() bool {
		return getRun(t, s, name).Phase == api.PhaseSUCCEEDED
	})

	status := func(method, url, token string) int {
		req, err := http.NewRequest(method, url, strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	runs := s.APIURL + "/v1/projects/" + project + "/domains/" + domain + "/runs"
	require.Equal(t, http.StatusUnauthorized, status(http.MethodGet, runs, ""))
	require.Equal(t, http.StatusOK, status(http.MethodGet, runs, s.Token))

	projects := []string{"elsewhere"}
	tok, err := s.Client.CreateTokenWithResponse(context.Background(),
		api.CreateTokenRequest{Name: "scoped", Role: api.RoleReader, Projects: &projects})
	require.NoError(t, err)
	require.NotNil(t, tok.JSON201, "%s", tok.Body)
	require.Equal(t, http.StatusNotFound, status(http.MethodGet, runs+"/"+name, *tok.JSON201.Token))

	workers, err := s.Client.ListWorkersWithResponse(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, workers.JSON200.Workers)
	w := workers.JSON200.Workers[0]
	abort := w.Address + "/v1/attempts/1/abort"
	require.Equal(t, http.StatusUnauthorized, status(http.MethodPost, abort, ""))
	require.Equal(t, http.StatusUnauthorized, status(http.MethodPost, abort, s.Token), "the admin token is not the worker's credential")
	require.Equal(t, http.StatusUnauthorized, status(http.MethodPost, abort, s.WorkerToken))
	require.Equal(t, http.StatusUnauthorized, status(http.MethodPost, abort, s.MetricsToken))
	require.Equal(t, http.StatusNotFound, status(http.MethodPost, abort, s.ExecutorCredential(w.Id)))
}
