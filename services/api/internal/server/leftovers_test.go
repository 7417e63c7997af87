package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

// TestSweepAsksWhichRunsAndAttemptsRemain: a worker's token asks which of
// the runs named exist (each once, in key order; not a deleted one nor
// another project's of the same name) and which of the attempts named are
// live, of any worker; another worker's route is 403, and a bad body is a
// 400 naming its field.
func TestSweepAsksWhichRunsAndAttemptsRemain(t *testing.T) {
	t.Parallel()
	const bootstrap = "test-worker-token-0123456789abcdef0123456789abcdef"
	f := newFixtureConfig(t, Config{WorkerToken: bootstrap})
	register := func(name string) (id, token string) {
		status, _, w := f.doAs(t, bootstrap, http.MethodPost, "/v1/workers",
			`{"name":"`+name+`","address":"http://127.0.0.1:1","slots":2}`)
		require.Equal(t, http.StatusCreated, status, w)
		return w["id"].(string), w["token"].(string)
	}
	idA, tokA := register("a")
	idB, tokB := register("b")
	for _, name := range []string{"r1", "r2"} {
		status, _, p := f.do(t, http.MethodPost, runsPath, `{"name":"`+name+`","spec":{"steps":[{"name":"a","command":"true"}]}}`)
		require.Equal(t, http.StatusCreated, status, p)
	}
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: "r1"}
	storetest.StartSteps(t, f.store, key, "a")
	d, err := f.store.Actions().GetAction(context.Background(), key.Action("a"))
	require.NoError(t, err)
	a, ok, err := storetest.AssignTask(context.Background(), f.store, d.Tasks[0].Task.ID, idA)
	require.NoError(t, err)
	require.True(t, ok)

	existing := "/v1/workers/" + idA + "/runs/existing"
	status, _, out := f.doAs(t, tokA, http.MethodPost, existing, `{"runs":[
		{"project":"demo","domain":"dev","run":"r2"},{"project":"demo","domain":"dev","run":"gone"},
		{"project":"other","domain":"dev","run":"r1"},{"project":"demo","domain":"prod","run":"r1"},
		{"project":"demo","domain":"dev","run":"r1"},{"project":"demo","domain":"dev","run":"r2"}]}`)
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, []any{map[string]any{"project": "demo", "domain": "dev", "run": "r1"},
		map[string]any{"project": "demo", "domain": "dev", "run": "r2"}}, out["runs"])
	status, _, out = f.doAs(t, tokA, http.MethodPost, existing, `{"runs":[{"project":"demo","domain":"dev","run":"gone"}]}`)
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, []any{}, out["runs"], "none exists: an empty list")
	status, _, _ = f.doAs(t, tokB, http.MethodPost, existing, `{"runs":[{"project":"demo","domain":"dev","run":"r1"}]}`)
	require.Equal(t, http.StatusForbidden, status, "another worker's route")

	live := fmt.Sprintf(`{"attempts":[%d, 999999, %d]}`, a.ID, a.ID)
	for _, w := range []struct{ id, token string }{{idA, tokA}, {idB, tokB}} {
		status, _, out = f.doAs(t, w.token, http.MethodPost, "/v1/workers/"+w.id+"/attempts/live", live)
		require.Equal(t, http.StatusOK, status, out)
		require.Equal(t, []any{float64(a.ID)}, out["attempts"], "a live attempt of any worker, once")
	}
	status, _, _ = f.doAs(t, tokB, http.MethodPost, "/v1/workers/"+idA+"/attempts/live", live)
	require.Equal(t, http.StatusForbidden, status, "another worker's route")

	many := `{"runs":[` + strings.TrimSuffix(strings.Repeat(`{"project":"demo","domain":"dev","run":"r1"},`, 1001), ",") + `]}`
	for _, c := range []struct{ name, path, body, field string }{
		{"no runs", existing, `{}`, "runs"},
		{"empty runs", existing, `{"runs":[]}`, "runs"},
		{"too many runs", existing, many, "runs"},
		{"bad project name", existing, `{"runs":[{"project":"Demo","domain":"dev","run":"r1"}]}`, "runs[0].project"},
		{"no run name", existing, `{"runs":[{"project":"demo","domain":"dev"}]}`, "runs[0].run"},
		{"traversal", existing, `{"runs":[{"project":"demo","domain":"..","run":"r1"}]}`, "runs[0].domain"},
		{"unknown field", existing, `{"runs":[{"project":"demo","domain":"dev","run":"r1","path":"/"}]}`, "runs[0]"},
		{"no attempts", "/v1/workers/" + idA + "/attempts/live", `{"attempts":[]}`, "attempts"},
		{"attempt id zero", "/v1/workers/" + idA + "/attempts/live", `{"attempts":[0]}`, "attempts[0]"},
		{"attempt id text", "/v1/workers/" + idA + "/attempts/live", `{"attempts":["1"]}`, "attempts[0]"},
	} {
		status, hdr, p := f.doAs(t, tokA, http.MethodPost, c.path, c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", c.name, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), c.name)
		require.Contains(t, fields(p), c.field, "%s: %v", c.name, p)
	}
}

// TestDeleteRunTellsItsExecutors: deleting an ended run answers the runs
// deleted and sends runs:remove, naming them, to the queue of the worker
// that ran its attempt.
func TestDeleteRunTellsItsExecutors(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	key, id, worker := f.placedAttempt(t)
	f.report(t, id, `{"state":"RUNNING"}`)
	f.report(t, id, `{"state":"SUCCEEDED","exit_code":0}`)
	_, err := f.db.Exec(`UPDATE runs SET phase = 'SUCCEEDED', ended_at = now() WHERE name = $1`, key.Run)
	require.NoError(t, err)

	status, _, out := f.do(t, http.MethodDelete, runsPath+"/"+key.Run, "")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, []any{key.Run}, out["deleted"])
	insp := asynq.NewInspector(f.redis)
	defer insp.Close()
	tasks, err := insp.ListPendingTasks(queue.WorkerQueue(worker))
	require.NoError(t, err)
	var removes []queue.RunsPayload
	for _, task := range tasks {
		if task.Type == queue.TypeRunsRemove {
			var p queue.RunsPayload
			require.NoError(t, json.Unmarshal(task.Payload, &p))
			removes = append(removes, p)
		}
	}
	require.Equal(t, []queue.RunsPayload{{Project: key.Project, Domain: key.Domain, Runs: []string{key.Run}}}, removes)
}
