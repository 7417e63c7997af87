package main

import (
	"net/http"
	"strings"
	"testing"
)

const rateLimitJSON = `{"name":"paid-api","limit":100,"per":"1s","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`

const rateLimits = "/v1/projects/demo/rate-limits"

// Each rate-limit command calls its route and prints a line or a table;
// bad input is a usage error naming the field, sent nowhere.
func TestRateLimitCommands(t *testing.T) {
	t.Parallel()
	s, api := newRoutes(t, map[string]reply{
		"PUT " + rateLimits + "/paid-api":    {http.StatusCreated, rateLimitJSON},
		"GET " + rateLimits:                  {http.StatusOK, `{"rate_limits":[` + rateLimitJSON + `]}`},
		"GET " + rateLimits + "/paid-api":    {http.StatusOK, rateLimitJSON},
		"DELETE " + rateLimits + "/paid-api": {http.StatusNoContent, ""},
	})
	cases := []struct {
		args []string
		path string
		body map[string]any
		want []string
	}{
		{args: []string{"rate-limit", "put", "paid-api", "--limit", "100", "--per", "1s"}, path: "PUT " + rateLimits + "/paid-api",
			body: map[string]any{"limit": float64(100), "per": "1s"}, want: []string{"rate limit paid-api created: 100 per 1s\n"}},
		{args: []string{"rate-limit", "list"}, path: "GET " + rateLimits, want: []string{"NAME", "LIMIT", "PER", "paid-api", "100", "1s"}},
		{args: []string{"rate-limit", "get", "paid-api"}, path: "GET " + rateLimits + "/paid-api", want: []string{"paid-api", "100"}},
		{args: []string{"rate-limit", "delete", "paid-api"}, path: "DELETE " + rateLimits + "/paid-api",
			want: []string{"rate limit paid-api deleted\n"}},
	}
	for i, c := range cases {
		out, err := capstan(api, c.args...)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q printed %q, want %q in it", c.args, out, w)
			}
		}
		got := s.received()
		if len(got) != i+1 || got[i].method+" "+got[i].path != c.path {
			t.Fatalf("%q: requests %+v, want %s last", c.args, got, c.path)
		}
		if c.body != nil && !equalJSON(got[i].body, c.body) {
			t.Errorf("%q: body %v, want %v", c.args, got[i].body, c.body)
		}
	}
	for args, want := range map[string]string{
		"put paid-api --limit 0 --per 1s":   "--limit: must be between 1 and 1000000",
		"put paid-api --limit 10 --per 2s":  `--per: must be one of 1s, 1m, 1h; got "2s"`,
		"put Bad_Name --limit 10 --per 1s":  "NAME: must be 1-63 characters",
		"put paid-api --per 1s":             `"limit" not set`,
		"put paid-api --limit ten --per 1s": "--limit",
		"get":                               "accepts 1 arg",
	} {
		_, err := capstan(api, append([]string{"rate-limit"}, strings.Fields(args)...)...)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a usage error with %q", args, err, want)
		}
	}
	if got := s.received(); len(got) != len(cases) {
		t.Errorf("usage errors sent %+v", got[len(cases):])
	}
}
