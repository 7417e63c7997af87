package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/stretchr/testify/require"
)

const secretValue = "hunter2-very-secret"

// TestSecretEnvIsNeverReturned: a step's secret_env shows as "***" on the
// run, reaches the executor's attempt spec, and is masked in the output
// shipped and reported.
func TestSecretEnvIsNeverReturned(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, p := f.do(t, http.MethodPost, runsPath, `{"name":"sec","spec":{"steps":[{"name":"s","command":"x",`+
		`"env":{"PLAIN":"p"},"secret_env":{"API_KEY":"`+secretValue+`"}}]}}`)
	require.Equal(t, http.StatusCreated, status, p)
	require.NotContains(t, fmt.Sprint(p), secretValue)
	ids := startTasks(t, f, domain.RunKey{Project: "demo", Domain: "dev", Run: "sec"}, "s")
	id := ids["s"][0]

	raw := f.raw(t, runsPath+"/sec")
	require.NotContains(t, raw, secretValue, "the run never shows the value")
	require.Contains(t, raw, `"secret_env":{"API_KEY":"***"}`)

	status, _, spec := f.do(t, http.MethodGet, fmt.Sprintf("/v1/attempts/%d", id), "")
	require.Equal(t, http.StatusOK, status, spec)
	require.Equal(t, map[string]any{"PLAIN": "p", "API_KEY": secretValue}, spec["env"], "the executor gets it")

	f.appendLogs(t, id, http.StatusNoContent, `{"stream":"stdout","data":"key=`+secretValue+`\n"}`)
	logs := f.raw(t, runsPath+"/sec/actions/s/tasks/0/attempts/1/logs")
	require.NotContains(t, logs, secretValue)
	require.Contains(t, logs, "key=***")

	f.report(t, id, `{"state":"FAILED","exit_code":1,"error":"bad `+secretValue+`","stderr":"`+secretValue+`"}`)
	raw = f.raw(t, runsPath+"/sec/actions/s")
	require.NotContains(t, raw, secretValue, "the final report's error is masked")
}

func TestSecretEnvIsValidated(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for body, field := range map[string]string{
		`"env":{"A":"1"},"secret_env":{"A":"2"}`: "spec.steps[0].secret_env.A",
		`"secret_env":{"CAPSTAN_X":"2"}`:         "spec.steps[0].secret_env.CAPSTAN_X",
		`"secret_env":{"1BAD":"2"}`:              "spec.steps[0].secret_env.1BAD",
	} {
		status, _, p := f.do(t, http.MethodPost, runsPath, `{"spec":{"steps":[{"name":"s","command":"x",`+body+`}]}}`)
		require.Equal(t, http.StatusUnprocessableEntity, status, "%s: %v", body, p)
		require.Contains(t, fields(p), field, body)
	}
}

// raw GETs path as the admin and returns the body.
func (f *fixture) raw(t *testing.T, path string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return strings.TrimSpace(string(b))
}
