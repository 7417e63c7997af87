package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A concurrency key that does not compile, is not a string or fails on the
// run's params, a max_runs below 1 and an unknown strategy are 422s naming
// the field; nothing is written. A key that is "" is a key.
func TestConcurrencyProblems(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	spec := func(concurrency string) string {
		return `{"spec":{"params":[{"name":"ENV"}],"concurrency":` + concurrency + `,"steps":[{"name":"a","command":"true"}]},` +
			`"params":{"ENV":"prod"}}`
	}
	for _, c := range []struct{ body, field string }{
		{spec(`{"key":"params.ENV +","max_runs":1}`), "spec.concurrency.key"},
		{spec(`{"key":"1","max_runs":1}`), "spec.concurrency.key"},
		{spec(`{"key":"params.OTHER","max_runs":1}`), "spec.concurrency.key"},
		{spec(`{"key":"params.ENV","max_runs":0}`), "spec.concurrency.max_runs"},
		{spec(`{"key":"params.ENV","max_runs":1,"strategy":"drop"}`), "spec.concurrency.strategy"},
		{`{"spec":{"fairness_key":"params.NOPE","steps":[{"name":"a","command":"true"}]}}`, "spec.fairness_key"},
	} {
		status, _, p := f.do(t, http.MethodPost, runsPath, c.body)
		require.Contains(t, []int{http.StatusUnprocessableEntity, http.StatusBadRequest}, status, "%s: %v", c.body, p)
		require.Contains(t, fields(p), c.field, "%s: %v", c.body, p)
	}
	require.Equal(t, 0, runCount(t, f.store))
	status, _, run := f.do(t, http.MethodPost, runsPath, spec(`{"key":"\"\"","max_runs":1}`))
	require.Equal(t, http.StatusCreated, status, run)
	require.Equal(t, "", run["concurrency_key"])
	status, _, ledger := f.do(t, http.MethodGet, "/v1/projects/demo/domains/dev/concurrency", "")
	require.Equal(t, http.StatusOK, status, ledger)
	keys := ledger["keys"].([]any)
	require.Len(t, keys, 1)
	require.Equal(t, "", keys[0].(map[string]any)["key"])
	require.Equal(t, float64(1), keys[0].(map[string]any)["waiting"], "no scheduler runs here: the run waits")
}
