package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

const settingsPath = "/v1/projects/pa/settings"

// A project's settings are empty until an admin sets them; a reader of
// the project reads them and may not set them; a bad duration is 422
// naming its field, a body the schema refuses 400, and neither changes
// what was set. A run shows the ttl of its spec.
func TestProjectSettings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := newAuthTokens(t, f.store)
	status, _, out := f.doAs(t, tok.reader, http.MethodGet, settingsPath, "")
	require.Equal(t, http.StatusOK, status, out)
	require.Empty(t, out)

	set := `{"retention":{"after_success":"2s","after_failure":"720h"}}`
	status, _, out = f.doAs(t, tok.scopedWriter, http.MethodPut, settingsPath, set)
	require.Equal(t, http.StatusForbidden, status, out)
	status, _, out = f.do(t, http.MethodPut, settingsPath, set)
	require.Equal(t, http.StatusOK, status, out)
	want := map[string]any{"retention": map[string]any{"after_success": "2s", "after_failure": "720h"}}
	require.Equal(t, want, out)
	status, _, out = f.doAs(t, tok.reader, http.MethodGet, settingsPath, "")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, want, out)
	status, _, out = f.doAs(t, tok.otherProject, http.MethodGet, settingsPath, "")
	require.Equal(t, http.StatusNotFound, status, out)

	for body, field := range map[string]string{
		`{"retention":{"after_success":"2 days"}}`:    "retention.after_success",
		`{"retention":{"after_failure":"-1s"}}`:       "retention.after_failure",
		`{"retention":{"after_completion":"90000h"}}`: "retention.after_completion",
	} {
		status, _, out = f.do(t, http.MethodPut, settingsPath, body)
		require.Equal(t, http.StatusUnprocessableEntity, status, out)
		errs, _ := out["errors"].([]any)
		require.Len(t, errs, 1, out)
		require.Equal(t, field, errs[0].(map[string]any)["field"], out)
	}
	for _, body := range []string{`{"retention":{"after":"1s"}}`, `{"retention":"1s"}`, `{"extra":1}`} {
		status, _, out = f.do(t, http.MethodPut, settingsPath, body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", body, out)
	}
	status, _, out = f.doAs(t, tok.reader, http.MethodGet, settingsPath, "")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, want, out, "a refused set changes nothing")
	status, _, out = f.do(t, http.MethodPut, settingsPath, `{}`)
	require.Equal(t, http.StatusOK, status, out)
	require.Empty(t, out, "a set replaces the settings")
}
