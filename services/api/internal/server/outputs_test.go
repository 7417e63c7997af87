package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// startTasks starts the named steps (storetest.StartSteps) and binds each of
// their tasks to a new worker; it returns the attempt ids by step, in
// task-index order.
func startTasks(t *testing.T, f *fixture, key domain.RunKey, steps ...string) map[string][]int64 {
	t.Helper()
	ctx := context.Background()
	storetest.StartSteps(t, f.store, key, steps...)
	w, err := f.store.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	require.NoError(t, err)
	ids := map[string][]int64{}
	for _, step := range steps {
		d, err := f.store.Actions().GetAction(ctx, key.Action(step))
		require.NoError(t, err)
		for _, task := range d.Tasks {
			a, ok, err := storetest.AssignTask(ctx, f.store, task.Task.ID, w.ID)
			require.NoError(t, err)
			require.True(t, ok)
			ids[step] = append(ids[step], a.ID)
		}
	}
	return ids
}

// report posts an executor's report about attempt id.
func (f *fixture) report(t *testing.T, id int64, body string) {
	t.Helper()
	status, _, p := f.do(t, http.MethodPost, fmt.Sprintf("/v1/attempts/%d/report", id), body)
	require.Equal(t, http.StatusOK, status, p)
}

func TestReportedOutputsShowOnTheRunAndReachInputs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"outs","spec":{"mode":"DAG","steps":[
		{"name":"one","command":"x","outputs":["count"]},
		{"name":"two","command":"x","replicas":2,"outputs":["n"]},
		{"name":"use","command":"x","depends_on":["one","two"],"outputs":["done"],
		 "inputs":[{"from":"one.count","as":"COUNT"},{"from":"two.n","as":"NS"}]}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: "outs"}
	ids := startTasks(t, f, key, "one", "two")
	f.report(t, ids["one"][0], `{"state":"SUCCEEDED","exit_code":0,"outputs":{"count":"3\n"}}`)
	f.report(t, ids["two"][0], `{"state":"SUCCEEDED","exit_code":0,"outputs":{"n":"a"}}`)
	f.report(t, ids["two"][1], `{"state":"SUCCEEDED","exit_code":0,"outputs":{"n":"<b>"}}`)
	for _, step := range []string{"one", "two"} { // as the scheduler would, once the tasks ended
		d, err := f.store.Actions().GetAction(ctx, key.Action(step))
		require.NoError(t, err)
		_, err = f.store.Actions().SetActionPhase(ctx, key.Action(step), domain.Phase(d.Action.Phase), domain.PhaseSucceeded, time.Now().UTC())
		require.NoError(t, err)
	}

	status, _, run := f.do(t, http.MethodGet, runsPath+"/outs", "")
	require.Equal(t, http.StatusOK, status, run)
	got := map[string]any{}
	for _, a := range run["actions"].([]any) {
		a := a.(map[string]any)
		got[a["name"].(string)] = a["outputs"]
	}
	require.Equal(t, map[string]any{"a0": nil, "one": map[string]any{"count": "3\n"},
		"two": map[string]any{"n": `["a","<b>"]`}, "use": nil}, got,
		"one replica: the value as written; two: a JSON array in task-index order; none: absent")
	status, _, action := f.do(t, http.MethodGet, runsPath+"/outs/actions/two", "")
	require.Equal(t, http.StatusOK, status, action)
	require.Equal(t, got["two"], action["outputs"])

	use := startTasks(t, f, key, "use")["use"][0]
	status, _, spec := f.do(t, http.MethodGet, fmt.Sprintf("/v1/attempts/%d", use), "")
	require.Equal(t, http.StatusOK, status, spec)
	require.Equal(t, map[string]any{"COUNT": "3\n", "NS": `["a","<b>"]`}, spec["inputs"])
	require.Equal(t, []any{"done"}, spec["outputs"])
	status, _, spec = f.do(t, http.MethodGet, fmt.Sprintf("/v1/attempts/%d", ids["one"][0]), "")
	require.Equal(t, http.StatusOK, status, spec)
	require.Nil(t, spec["inputs"], "a step without inputs gets none")
}

func TestReportOutputsAreBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	value := strings.Repeat("x", 64<<10)
	big := strings.Repeat("x", domain.MaxOutputValueBytes)
	many := map[string]string{}
	for i := range 17 { // 17 x 64 KiB: past 1 MiB, and past the 1 MiB body limit of other routes
		many[fmt.Sprintf("o%02d", i)] = value
	}
	raw, err := json.Marshal(map[string]any{"state": "SUCCEEDED", "outputs": many})
	require.NoError(t, err)
	cases := []struct {
		name, body, field string
	}{
		{"not an env name", `{"state":"SUCCEEDED","outputs":{"1x":"v"}}`, "outputs.1x"},
		{"over 1 MiB a value", `{"state":"SUCCEEDED","outputs":{"big":"` + big + `x"}}`, "outputs.big"},
		{"over 1 MiB", string(raw), "outputs"},
		{"NUL", `{"state":"SUCCEEDED","outputs":{"bin":"a\u0000b"}}`, "outputs.bin"},
	}
	for _, c := range cases {
		status, hdr, p := f.do(t, http.MethodPost, "/v1/attempts/1/report", c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", c.name, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), c.name)
		require.Contains(t, fields(p), c.field, "%s: %v", c.name, p)
	}
	status, _, p := f.do(t, http.MethodPost, "/v1/attempts/1/report",
		`{"state":"SUCCEEDED","outputs":{"max":"`+big+`"}}`)
	require.Equal(t, http.StatusNotFound, status, "1 MiB is allowed (and attempt 1 does not exist): %v", p)
}
