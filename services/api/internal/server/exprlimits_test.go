package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A step's `if` past 4096 characters is refused by the OpenAPI maxLength
// (400 invalid_request naming it, as every schema violation), one within
// 4096 characters but past 4096 bytes by the domain's limit (422 naming
// it), one of 10 MiB with a 413 before it is parsed, and one whose
// estimated cost is over the limit (nested comprehensions) with a 422
// naming it.
func TestConditionLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	body := func(cond string) string {
		b, err := json.Marshal(map[string]any{"spec": map[string]any{"mode": "DAG",
			"steps": []map[string]any{{"name": "a", "command": "true", "if": cond}}}})
		require.NoError(t, err)
		return string(b)
	}
	long := `"` + strings.Repeat("x", 4100) + `" == "y"`
	status, _, p := f.do(t, http.MethodPost, runsPath, body(long))
	require.Equal(t, http.StatusBadRequest, status, p)
	require.Contains(t, fields(p), "spec.steps[0].if", p)

	wide := `"` + strings.Repeat("é", 2100) + `" == "y"` // 2,109 characters, 4,209 bytes
	status, _, p = f.do(t, http.MethodPost, runsPath, body(wide))
	require.Equal(t, http.StatusUnprocessableEntity, status, p)
	require.Contains(t, fields(p), "spec.steps[0].if", p)
	require.Contains(t, p["detail"], "is 4209 bytes; at most 4096", p)

	status, _, p = f.do(t, http.MethodPost, runsPath, body(`"`+strings.Repeat("x", 10<<20)+`" == "y"`))
	require.Equal(t, http.StatusRequestEntityTooLarge, status, p)

	l := "[" + strings.TrimSuffix(strings.Repeat("1,", 50), ",") + "]"
	deep := l + ".all(a, " + l + ".all(b, " + l + ".all(c, " + l + ".all(d, " + l + ".all(e, a + b + c + d + e > 0)))))"
	status, _, p = f.do(t, http.MethodPost, runsPath, body(deep))
	require.Equal(t, http.StatusUnprocessableEntity, status, p)
	require.Contains(t, fields(p), "spec.steps[0].if", p)
	require.Contains(t, p["detail"], "may cost", p)

	status, _, p = f.do(t, http.MethodPost, runsPath, body(`[1, 2].all(a, a > 0)`))
	require.Equal(t, http.StatusCreated, status, p)
}
