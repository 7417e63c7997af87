package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

const cachePath = "/v1/projects/demo/domains/dev/cache"

// Cache keys are hex SHA-256s.
var (
	oldKey = strings.Repeat("a", 64)
	newKey = strings.Repeat("b", 64)
)

// The cache routes list entries newest first in pages, each with its
// reservation, evict one (404 the second time) and answer a bad cursor with
// a problem; an action shows its cache status and key.
func TestCacheListEvictAndActionStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"r","spec":{"steps":[
		{"name":"s","command":"x","outputs":["n"],"cache":{"version":"v1","serializable":true}}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: "r"}
	now := time.Now().UTC()
	require.NoError(t, f.store.InTx(ctx, func(tx *store.Store) error {
		run, err := tx.Runs().LockRun(ctx, key)
		if err != nil {
			return err
		}
		if _, err := tx.Runs().ExpandSteps(ctx, key, run.Spec.Steps); err != nil {
			return err
		}
		for i, k := range []string{oldKey, newKey} {
			e := store.CacheEntry{Project: "demo", Domain: "dev", Key: k, Version: "v1", RunName: "r", ActionName: "s",
				Outputs: map[string]string{"n": k[:1]}}
			if err := tx.Cache().PutCacheEntry(ctx, e, now.Add(time.Duration(i)*time.Second)); err != nil {
				return err
			}
		}
		if _, err := tx.Cache().ReserveCache(ctx, key.Action("s"), newKey, now.Add(time.Minute), now); err != nil {
			return err
		}
		return tx.Cache().CompleteFromCache(ctx, key.Action("s"), domain.PhaseQueued,
			store.CacheEntry{Key: oldKey, Outputs: map[string]string{"n": "a"}}, now)
	}))

	status, _, page := f.do(t, http.MethodGet, cachePath+"?limit=1", "")
	require.Equal(t, http.StatusOK, status, page)
	entries := page["entries"].([]any)
	require.Len(t, entries, 1)
	e := entries[0].(map[string]any)
	require.Equal(t, newKey, e["key"])
	require.Equal(t, map[string]any{"n": "b"}, e["outputs"])
	require.Equal(t, "r/s", e["reservation"].(map[string]any)["owner"])
	status, _, page = f.do(t, http.MethodGet, cachePath+"?limit=1&cursor="+page["next_cursor"].(string), "")
	require.Equal(t, http.StatusOK, status, page)
	e = page["entries"].([]any)[0].(map[string]any)
	require.Equal(t, oldKey, e["key"])
	require.Nil(t, e["reservation"])
	require.Nil(t, page["next_cursor"])
	status, hdr, p := f.do(t, http.MethodGet, cachePath+"?cursor=bogus!", "")
	require.Equal(t, http.StatusBadRequest, status, p)
	require.Equal(t, "application/problem+json", hdr.Get("Content-Type"))

	status, _, action := f.do(t, http.MethodGet, runsPath+"/r/actions/s", "")
	require.Equal(t, http.StatusOK, status, action)
	require.Equal(t, "HIT", action["cache_status"])
	require.Equal(t, oldKey, action["cache_key"])
	require.Equal(t, map[string]any{"n": "a"}, action["outputs"])

	status, _, _ = f.do(t, http.MethodDelete, cachePath+"/"+oldKey, "")
	require.Equal(t, http.StatusNoContent, status)
	status, hdr, p = f.do(t, http.MethodDelete, cachePath+"/"+oldKey, "")
	require.Equal(t, http.StatusNotFound, status, p)
	require.Equal(t, "application/problem+json", hdr.Get("Content-Type"))
	require.Equal(t, "cache entry "+oldKey+" not found", p["detail"])
	status, hdr, p = f.do(t, http.MethodDelete, cachePath+"/not-a-key", "")
	require.Equal(t, http.StatusBadRequest, status, p)
	require.Equal(t, "application/problem+json", hdr.Get("Content-Type"))
}

// DELETE .../cache evicts every entry its filters select (the list's
// filters) and answers how many; a bare DELETE, or all=true with a filter,
// is a 400 naming all that deletes nothing, and a reader may not delete.
func TestCacheDeleteByFilter(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, run := range []string{"r1", "r2"} {
		status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"`+run+`","spec":{"steps":[{"name":"s","command":"x"}]}}`)
		require.Equal(t, http.StatusCreated, status, body)
	}
	now := time.Now().UTC().Truncate(time.Second)
	for i, e := range []struct{ version, run string }{{"v1", "r1"}, {"v1", "r2"}, {"v2", "r1"}, {"v1", "r1"}} {
		require.NoError(t, f.store.Cache().PutCacheEntry(ctx, store.CacheEntry{Project: "demo", Domain: "dev",
			Key: strings.Repeat(string(rune('a'+i)), 64), Version: e.version, RunName: e.run, ActionName: "a0"},
			now.Add(time.Duration(i)*time.Minute)))
	}
	count := func(query string) int {
		status, _, page := f.do(t, http.MethodGet, cachePath+query, "")
		require.Equal(t, http.StatusOK, status, page)
		return len(page["entries"].([]any))
	}
	require.Equal(t, 2, count("?version=v1&run=r1"), "the list reads the filters")

	for query, want := range map[string]string{
		"":                      "all: set a filter (version, run, step, created_before), or all=true",
		"?all=false":            "all: set a filter",
		"?all=true&version=v1":  "all: all=true deletes every entry",
		"?created_before=today": "created_before",
		"?version=no%20spaces":  "version",
	} {
		status, hdr, p := f.do(t, http.MethodDelete, cachePath+query, "")
		require.Equal(t, http.StatusBadRequest, status, "%q: %v", query, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), query)
		require.Contains(t, p["detail"], want, query)
	}
	require.Equal(t, 4, count(""), "a refused delete deletes nothing")
	tok := newAuthTokens(t, f.store)
	status, _, p := f.doAs(t, tok.reader, http.MethodDelete, cachePath+"?all=true", "")
	require.Equal(t, http.StatusForbidden, status, p)

	status, _, body := f.do(t, http.MethodDelete, cachePath+"?version=v1&run=r1", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, map[string]any{"deleted": float64(2)}, body)
	require.Equal(t, 2, count(""))
	status, _, body = f.do(t, http.MethodDelete, cachePath+"?created_before="+now.Add(2*time.Minute).Format(time.RFC3339), "")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, float64(1), body["deleted"], "created_before is exclusive: r2's entry at +1m goes")
	status, _, body = f.do(t, http.MethodDelete, cachePath+"?all=true", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, float64(1), body["deleted"])
	require.Zero(t, count(""))
}
