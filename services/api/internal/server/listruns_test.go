package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// names lists the names of a run list's runs, in order.
func names(list map[string]any) []string {
	var out []string
	for _, r := range list["runs"].([]any) {
		out = append(out, r.(map[string]any)["name"].(string))
	}
	return out
}

func TestListRunsNameContains(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, n := range []string{"alpha-1", "beta-2", "alpha-3", "xalphay"} {
		status, _, run := f.do(t, http.MethodPost, runsPath, `{"name":"`+n+`","spec":{"steps":[{"name":"a","command":"true"}]}}`)
		require.Equal(t, http.StatusCreated, status, run)
	}

	status, _, list := f.do(t, http.MethodGet, runsPath+"?name_contains=alpha", "")
	require.Equal(t, http.StatusOK, status, list)
	require.Equal(t, []string{"xalphay", "alpha-3", "alpha-1"}, names(list), "newest first, substring anywhere")

	status, _, page := f.do(t, http.MethodGet, runsPath+"?name_contains=alpha&limit=2", "")
	require.Equal(t, http.StatusOK, status, page)
	require.Equal(t, []string{"xalphay", "alpha-3"}, names(page))
	status, _, page = f.do(t, http.MethodGet, runsPath+"?name_contains=alpha&limit=2&cursor="+page["next_cursor"].(string), "")
	require.Equal(t, http.StatusOK, status, page)
	require.Equal(t, []string{"alpha-1"}, names(page), "the cursor keeps the filter's order")
	require.Nil(t, page["next_cursor"])

	status, _, list = f.do(t, http.MethodGet, runsPath+"?name_contains=-", "")
	require.Equal(t, http.StatusOK, status, list)
	require.Len(t, list["runs"], 3, "a dash is plain text, not a pattern")

	for _, bad := range []string{"%25", "a_b", "ALPHA", "%00"} {
		status, _, p := f.do(t, http.MethodGet, runsPath+"?name_contains="+bad, "")
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", bad, p)
		require.Equal(t, "invalid_request", p["code"], bad)
	}
}
