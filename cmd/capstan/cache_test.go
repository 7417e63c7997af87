package main

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

const cacheRoute = "/v1/projects/demo/domains/dev/cache"

// cache delete deletes one entry by KEY, or what its filter flags (the
// list's too) select, or --all, and prints how many; bad input is a usage
// error naming the flag, sent nowhere.
func TestCacheCommands(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("a", 64)
	s, api := newRoutes(t, map[string]reply{
		"GET " + cacheRoute: {http.StatusOK, `{"entries":[{"key":"` + key + `","version":"v1","run":"r1","step":"s",` +
			`"outputs":{},"created_at":"2026-01-01T00:00:00Z","expires_at":"2026-01-02T00:00:00Z"}]}`},
		"DELETE " + cacheRoute:             {http.StatusOK, `{"deleted":3}`},
		"DELETE " + cacheRoute + "/" + key: {http.StatusNoContent, ""},
	})
	cases := []struct {
		args        []string
		path, query string
		want        string
	}{
		{[]string{"list", "--version", "v1", "--step", "s"}, "GET " + cacheRoute, "limit=50&step=s&version=v1", "v1"},
		{[]string{"delete", key}, "DELETE " + cacheRoute + "/" + key, "", "cache entry " + key + " deleted\n"},
		{[]string{"delete", "--version", "v1", "--run", "r1", "--created-before", "2026-01-02T00:00:00Z"}, "DELETE " + cacheRoute,
			"created_before=2026-01-02T00%3A00%3A00Z&run=r1&version=v1", "3 cache entries deleted from demo/dev\n"},
		{[]string{"delete", "--all"}, "DELETE " + cacheRoute, "all=true", "3 cache entries deleted"},
	}
	for i, c := range cases {
		out, err := capstan(api, append([]string{"cache"}, c.args...)...)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("%q printed %q, want %q in it", c.args, out, c.want)
		}
		got := s.received()
		if len(got) != i+1 || got[i].method+" "+got[i].path != c.path || !sameQuery(got[i].query, c.query) {
			t.Fatalf("%q: requests %+v, want %s?%s last", c.args, got, c.path, c.query)
		}
	}
	for args, want := range map[string]string{
		"delete":                            "--all: give KEY, a filter (--version, --run, --step, --created-before), or --all",
		"delete --all --step s":             "--all: deletes every entry; drop it",
		"delete " + key + " --version v1":   "KEY: deletes one entry",
		"delete --created-before yesterday": `--created-before: must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z; got "yesterday"`,
		"delete --version v/1":              `--version: must be 1-63 characters of [A-Za-z0-9._-]`,
		"delete --run Bad_Run":              `--run: must be 1-63 characters of [a-z0-9-]`,
		"list --step Bad_Step":              `--step: must be 1-63 characters`,
		"delete " + key + " " + key:         "accepts at most 1 arg",
		"delete --all=maybe":                "--all",
	} {
		_, err := capstan(api, append([]string{"cache"}, strings.Fields(args)...)...)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a usage error with %q", args, err, want)
		}
	}
	if got := s.received(); len(got) != len(cases) {
		t.Errorf("usage errors sent %+v", got[len(cases):])
	}
}

// sameQuery reports whether two URL queries hold the same values.
func sameQuery(a, b string) bool {
	qa, errA := url.ParseQuery(a)
	qb, errB := url.ParseQuery(b)
	return errA == nil && errB == nil && maps.EqualFunc(qa, qb, slices.Equal)
}
