package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

const rateLimitsPath = "/v1/projects/demo/rate-limits"

// A rate limit is created (201), replaced (200), read, listed and deleted;
// a missing one is a 404.
func TestRateLimitCRUD(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, r := f.do(t, http.MethodPut, rateLimitsPath+"/paid-api", `{"limit":100,"per":"1s"}`)
	require.Equal(t, http.StatusCreated, status, r)
	require.Equal(t, "paid-api", r["name"])
	require.Equal(t, float64(100), r["limit"])
	require.Equal(t, "1s", r["per"])
	status, _, r = f.do(t, http.MethodPut, rateLimitsPath+"/paid-api", `{"limit":5,"per":"1m"}`)
	require.Equal(t, http.StatusOK, status, r)
	require.Equal(t, "1m", r["per"])
	status, _, r = f.do(t, http.MethodGet, rateLimitsPath+"/paid-api", "")
	require.Equal(t, http.StatusOK, status, r)
	require.Equal(t, float64(5), r["limit"])
	status, _, r = f.do(t, http.MethodGet, rateLimitsPath, "")
	require.Equal(t, http.StatusOK, status, r)
	require.Len(t, r["rate_limits"], 1)
	status, _, _ = f.do(t, http.MethodDelete, rateLimitsPath+"/paid-api", "")
	require.Equal(t, http.StatusNoContent, status)
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		status, hdr, p := f.do(t, m, rateLimitsPath+"/paid-api", "")
		require.Equal(t, http.StatusNotFound, status, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"))
	}
}

// Bad input is a 422 problem naming limit or per; a bad name is a 400, as
// every name in a path.
func TestPutRateLimitRejects(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cases := []struct {
		name, path, body string
		status           int
		fields           []string
	}{
		{"a zero limit", "/a", `{"limit":0,"per":"1s"}`, 422, []string{"limit"}},
		{"a period not offered", "/a", `{"limit":10,"per":"2s"}`, 400, []string{"per"}},
		{"nothing given", "/a", `{}`, 422, []string{"limit", "per"}},
		{"a limit that is not a number", "/a", `{"limit":"ten","per":"1s"}`, 400, []string{"limit"}},
		{"a bad name", "/Not_A_Name", `{"limit":10,"per":"1s"}`, 400, nil},
	}
	for _, c := range cases {
		status, hdr, p := f.do(t, http.MethodPut, rateLimitsPath+c.path, c.body)
		require.Equal(t, c.status, status, "%s: %v", c.name, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), c.name)
		if c.status == 422 {
			require.Equal(t, c.fields, fields(p), "%s: every field, sorted", c.name)
		}
	}
}

// A run whose step takes a rate limit the project does not have, or whose
// step keys fail on its params at some task index, is a 422 naming the
// field (workflow. for a template's run).
func TestCreateRunChecksStepAdmission(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, p := f.do(t, http.MethodPut, rateLimitsPath+"/paid-api", `{"limit":10,"per":"1s"}`)
	require.Equal(t, http.StatusCreated, status, p)
	cases := []struct {
		name, body string
		status     int
		fields     []string
	}{
		{"a rate limit of the project", `{"spec":{"steps":[{"name":"a","command":"true",
			"rate_limits":[{"name":"paid-api"}],"concurrency":{"key":"\"db\"","max_tasks":1}}]}}`, 201, nil},
		{"a rate limit the project does not have", `{"spec":{"steps":[{"name":"a","command":"true"},{"name":"b","command":"true",
			"rate_limits":[{"name":"paid-api"},{"name":"ghost"}]}]}}`, 422, []string{"spec.steps[1].rate_limits[1].name"}},
		{"a key that fails at a later task index", `{"spec":{"steps":[{"name":"a","command":"true","replicas":3,
			"concurrency":{"key":"index < 2 ? \"x\" : params.nope","max_tasks":1}}]}}`, 422,
			[]string{"spec.steps[0].concurrency.key"}},
		{"a rate-limit key over a param the run does not have", `{"spec":{"steps":[{"name":"a","command":"true",
			"rate_limits":[{"name":"paid-api","key":"params.region"}]}]}}`, 422,
			[]string{"spec.steps[0].rate_limits[0].key"}},
		{"a key that evaluates to empty is the key empty", `{"spec":{"steps":[{"name":"a","command":"true",
			"rate_limits":[{"name":"paid-api","key":"\"\""}]}]}}`, 201, nil},
	}
	for _, c := range cases {
		status, _, p := f.do(t, http.MethodPost, runsPath, c.body)
		require.Equal(t, c.status, status, "%s: %v", c.name, p)
		if c.status == 422 {
			require.Equal(t, c.fields, fields(p), c.name)
		}
	}
	status, _, p = f.do(t, http.MethodPost, workflowsPath, `{"name":"w",
		"spec":{"steps":[{"name":"a","command":"true","rate_limits":[{"name":"ghost"}]}]}}`)
	require.Contains(t, []int{http.StatusCreated, http.StatusOK}, status, p)
	status, _, p = f.do(t, http.MethodPost, runsPath, `{"workflow":{"name":"w"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, p)
	require.Equal(t, []string{"workflow.steps[0].rate_limits[0].name"}, fields(p))
	status, _, p = f.do(t, http.MethodPost, batchPath, `{"runs":[{"workflow":{"name":"w"}},{"workflow":{"name":"w"}}]}`)
	require.Equal(t, http.StatusOK, status, p)
	for _, res := range p["results"].([]any) {
		require.Equal(t, []string{"workflow.steps[0].rate_limits[0].name"}, fields(res.(map[string]any)["error"].(map[string]any)))
	}
}
