package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

const fairSharePath = "/v1/projects/pa/fair-share"

// A project weighs 1 until an admin sets its weight; a reader of the
// project reads it and may not set it; a weight outside 1..1000 is 422
// naming weight, a body the schema refuses 400.
func TestFairShare(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := newAuthTokens(t, f.store)
	status, _, out := f.doAs(t, tok.reader, http.MethodGet, fairSharePath, "")
	require.Equal(t, http.StatusOK, status, out)
	require.EqualValues(t, 1, out["weight"])

	status, _, out = f.doAs(t, tok.scopedWriter, http.MethodPut, fairSharePath, `{"weight":5}`)
	require.Equal(t, http.StatusForbidden, status, out)
	status, _, out = f.do(t, http.MethodPut, fairSharePath, `{"weight":5}`)
	require.Equal(t, http.StatusOK, status, out)
	require.EqualValues(t, 5, out["weight"])
	status, _, out = f.doAs(t, tok.reader, http.MethodGet, fairSharePath, "")
	require.Equal(t, http.StatusOK, status, out)
	require.EqualValues(t, 5, out["weight"])
	status, _, out = f.doAs(t, tok.otherProject, http.MethodGet, fairSharePath, "")
	require.Equal(t, http.StatusNotFound, status, out)

	for _, body := range []string{`{"weight":0}`, `{"weight":1001}`, `{"weight":-3}`} {
		status, _, out = f.do(t, http.MethodPut, fairSharePath, body)
		require.Equal(t, http.StatusUnprocessableEntity, status, out)
		errs, _ := out["errors"].([]any)
		require.Len(t, errs, 1, out)
		require.Equal(t, "weight", errs[0].(map[string]any)["field"], out)
	}
	for _, body := range []string{`{}`, `{"weight":"x"}`, `{"weight":2,"extra":1}`} {
		status, _, out = f.do(t, http.MethodPut, fairSharePath, body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", body, out)
	}
	status, _, out = f.doAs(t, tok.reader, http.MethodGet, fairSharePath, "")
	require.Equal(t, http.StatusOK, status, out)
	require.EqualValues(t, 5, out["weight"], "a refused weight changes nothing")
}
