package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// TestCache runs the catalog (Flyte's: cache hits, serializable
// reservations) on one stack of four services, each scenario a parallel
// subtest with its own counter directory, so its steps have their own keys.
func TestCache(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{})

	t.Run("HitThenEvict", func(t *testing.T) { t.Parallel(); testCacheHitThenEvict(t, s) })
	t.Run("SerializableHit", func(t *testing.T) { t.Parallel(); testSerializableHit(t, s) })
	t.Run("SerializableOwnerAborted", func(t *testing.T) { t.Parallel(); testSerializableOwnerAborted(t, s) })
}

// cachedStep is a step "s" that, once file dir/go exists (at once when
// gate is false), makes a file dir/ran.<attempt id> (one per execution) and
// writes the output n; its cache spec is cache.
func cachedStep(dir string, gate bool, cache api.CacheSpec) api.Step {
	cmd := `touch ` + dir + `/ran.$CAPSTAN_ATTEMPT_ID; echo 42 > "$CAPSTAN_OUTPUTS_DIR/n"`
	if gate {
		cmd = `while [ ! -e ` + dir + `/go ]; do sleep 0.05; done; ` + cmd
	}
	return api.Step{Name: "s", Command: &cmd, Outputs: &[]string{"n"}, Cache: &cache}
}

// executions counts the files dir/ran.*.
func executions(t *testing.T, dir string) int {
	t.Helper()
	ran, err := filepath.Glob(filepath.Join(dir, "ran.*"))
	require.NoError(t, err)
	return len(ran)
}

// cacheStatus is a step's cache status, "" when absent.
func cacheStatus(a api.Action) string {
	if a.CacheStatus == nil {
		return ""
	}
	return string(*a.CacheStatus)
}

// testCacheHitThenEvict: a cached step executes once across two runs — the
// second is a HIT with the same outputs — and runs again once its entry is
// evicted.
func testCacheHitThenEvict(t *testing.T, s *Stack) {
	ctx := context.Background()
	dir := s.SharedDir()
	spec := api.WorkflowSpec{Steps: []api.Step{cachedStep(dir, false, api.CacheSpec{Version: "v1", MaxAge: ptr("1h")})}}
	first := action(waitPhase(t, s, create(t, s, spec), 60*time.Second, api.PhaseSUCCEEDED), "s")
	require.Equal(t, "POPULATED", cacheStatus(first))
	require.Equal(t, map[string]string{"n": "42"}, *first.Outputs)
	second := action(waitPhase(t, s, create(t, s, spec), 60*time.Second, api.PhaseSUCCEEDED), "s")
	require.Equal(t, "HIT", cacheStatus(second))
	require.Equal(t, *first.CacheKey, *second.CacheKey)
	require.Equal(t, *first.Outputs, *second.Outputs, "a hit has the cached outputs")
	require.Empty(t, second.Tasks, "a hit runs no task")
	require.Equal(t, 1, executions(t, dir))

	list, err := s.Client.ListCacheEntriesWithResponse(ctx, project, domain, &api.ListCacheEntriesParams{})
	require.NoError(t, err)
	require.NotNil(t, list.JSON200, "list: %d %s", list.StatusCode(), list.Body)
	var found *api.CacheEntry
	for i, e := range list.JSON200.Entries {
		if e.Key == *first.CacheKey {
			found = &list.JSON200.Entries[i]
		}
	}
	require.NotNil(t, found, "the entry is listed")
	require.Equal(t, map[string]string{"n": "42"}, found.Outputs)
	require.NotNil(t, found.ExpiresAt, "max_age 1h")

	del, err := s.Client.DeleteCacheEntryWithResponse(ctx, project, domain, *first.CacheKey)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, del.StatusCode(), string(del.Body))
	third := action(waitPhase(t, s, create(t, s, spec), 60*time.Second, api.PhaseSUCCEEDED), "s")
	require.Equal(t, "POPULATED", cacheStatus(third), "evicted: it runs again")
	require.Equal(t, 2, executions(t, dir))
	del, err = s.Client.DeleteCacheEntryWithResponse(ctx, project, domain, strings.Repeat("0", 64))
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, del.StatusCode())
	require.Equal(t, "application/problem+json", del.HTTPResponse.Header.Get("Content-Type"))
}

// ownerAndWaiter starts a run whose serializable step blocks on dir/go
// until it RUNS, then a second run of the same step, and waits until the
// second is WAITING_FOR_CACHE; it returns both runs' names.
func ownerAndWaiter(t *testing.T, s *Stack, dir string) (owner, waiter string) {
	t.Helper()
	spec := api.WorkflowSpec{Steps: []api.Step{cachedStep(dir, true, api.CacheSpec{Version: "v1", Serializable: ptr(true)})}}
	owner = create(t, s, spec)
	waitStep(t, s, owner, "s", 60*time.Second, api.PhaseRUNNING)
	waiter = create(t, s, spec)
	r := waitStep(t, s, waiter, "s", 60*time.Second, api.PhaseWAITINGFORCACHE)
	require.Empty(t, action(r, "s").Tasks, "a waiter runs nothing")
	return owner, waiter
}

// testSerializableHit: two concurrent runs of a serializable cached step
// execute it once: the second waits WAITING_FOR_CACHE, then is a HIT.
func testSerializableHit(t *testing.T, s *Stack) {
	dir := s.SharedDir()
	owner, waiter := ownerAndWaiter(t, s, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	o := action(waitPhase(t, s, owner, 60*time.Second, api.PhaseSUCCEEDED), "s")
	require.Equal(t, "POPULATED", cacheStatus(o))
	w := action(waitPhase(t, s, waiter, 60*time.Second, api.PhaseSUCCEEDED), "s")
	require.Equal(t, "HIT", cacheStatus(w))
	require.Equal(t, *o.Outputs, *w.Outputs)
	require.Equal(t, 1, executions(t, dir))
}

// testSerializableOwnerAborted: when the owner is aborted, its reservation
// is released and the waiter takes it and runs the step itself.
func testSerializableOwnerAborted(t *testing.T, s *Stack) {
	dir := s.SharedDir()
	owner, waiter := ownerAndWaiter(t, s, dir)
	abortRun(t, s, owner, "test abort")
	waitPhase(t, s, owner, 60*time.Second, api.PhaseABORTED)
	waitStep(t, s, waiter, "s", 60*time.Second, api.PhaseRUNNING)
	require.Equal(t, 0, executions(t, dir), "the aborted owner never got past its gate")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	w := action(waitPhase(t, s, waiter, 60*time.Second, api.PhaseSUCCEEDED), "s")
	require.Equal(t, "POPULATED", cacheStatus(w))
	require.Equal(t, 1, executions(t, dir))
}
