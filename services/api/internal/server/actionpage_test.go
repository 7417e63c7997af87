package server

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// GET of a run shows each action's task counts and its first page of
// tasks with the cursor of the next; GET of the action pages on from it
// to the last page, which has no cursor; a bad cursor or limit is a 400
// naming it.
func TestActionTasksPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, body := f.do(t, http.MethodPost, runsPath,
		`{"name":"wide","spec":{"steps":[{"name":"w","plugin":"noop","replicas":250},{"name":"ok","kind":"approval"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: "wide"}
	storetest.StartSteps(t, f.store, key, "w")

	status, _, run := f.do(t, http.MethodGet, runPath(key), "")
	require.Equal(t, http.StatusOK, status, run)
	w := run["actions"].([]any)[1].(map[string]any)
	require.Equal(t, "w", w["name"])
	require.EqualValues(t, 250, w["task_count"])
	require.Equal(t, map[string]any{"PENDING": float64(250)}, w["task_counts"])
	require.Len(t, w["tasks"], store.RunTasksPerAction)
	approval := run["actions"].([]any)[2].(map[string]any)
	require.EqualValues(t, 0, approval["task_count"])
	require.Equal(t, map[string]any{}, approval["task_counts"])
	require.NotContains(t, approval, "tasks_next_cursor")

	seen := len(w["tasks"].([]any))
	cursor := w["tasks_next_cursor"].(string)
	for cursor != "" {
		status, _, page := f.do(t, http.MethodGet, runPath(key)+"/actions/w?limit=60&cursor="+url.QueryEscape(cursor), "")
		require.Equal(t, http.StatusOK, status, page)
		tasks := page["tasks"].([]any)
		require.EqualValues(t, seen, tasks[0].(map[string]any)["index"], "pages in index order")
		seen += len(tasks)
		cursor, _ = page["tasks_next_cursor"].(string)
	}
	require.Equal(t, 250, seen)

	for q, field := range map[string]string{"?cursor=!!": "cursor", "?cursor=MTo": "cursor", "?limit=0": "limit",
		"?limit=501": "limit", "?limit=x": "limit"} {
		status, _, p := f.do(t, http.MethodGet, runPath(key)+"/actions/w"+q, "")
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", q, p)
		require.Equal(t, field, p["errors"].([]any)[0].(map[string]any)["field"], q)
	}
	status, _, p := f.do(t, http.MethodGet, runPath(key)+"/actions/nope?limit=5", "")
	require.Equal(t, http.StatusNotFound, status, p)
}
