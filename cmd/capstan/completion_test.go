package main

import (
	"net/http"
	"strings"
	"testing"
)

// __complete lists run names from the API, filtered by the prefix; a
// run's steps; enum values.
func TestCompletions(t *testing.T) {
	t.Parallel()
	list := `{"runs":[{"project":"demo","domain":"dev","name":"nightly-1","phase":"RUNNING","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"},` +
		`{"project":"demo","domain":"dev","name":"adhoc","phase":"RUNNING","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}]}`
	withSteps := strings.Replace(runJSON, `"actions":[]`, `"actions":[{"name":"a0","kind":"task","phase":"RUNNING","tasks":[]},`+
		`{"name":"build","kind":"task","phase":"RUNNING","tasks":[]},{"name":"gate","kind":"approval","phase":"PAUSED","tasks":[]}]`, 1)
	_, srv := newRoutes(t, map[string]reply{
		"GET /v1/projects/demo/domains/dev/runs":    {http.StatusOK, list},
		"GET /v1/projects/demo/domains/dev/runs/r1": {http.StatusOK, withSteps},
	})
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "get", ""}, "nightly-1\nadhoc\n:4\n"},
		{[]string{"run", "get", "ni"}, "nightly-1\n:4\n"},
		{[]string{"approve", "r1", ""}, "build\ngate\n:4\n"},
		{[]string{"run", "list", "--phase", "WAITING_F"}, "WAITING_FOR_RESOURCES\nWAITING_FOR_CACHE\n:4\n"},
	}
	for _, c := range cases {
		out, err := capstan(srv, append([]string{"__complete"}, c.args...)...)
		if err != nil || !strings.HasPrefix(out, c.want) {
			t.Errorf("%q: %q (%v), want %q", c.args, out, err, c.want)
		}
	}
}
