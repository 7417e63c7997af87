package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

const batchPath = runsPath + "/batch"

// okSpec is a valid spec of one step, as JSON.
const okSpec = `{"steps":[{"name":"a","command":"echo hi"}]}`

// batchBody is {"runs": [items...]}.
func batchBody(items ...string) string { return `{"runs":[` + strings.Join(items, ",") + `]}` }

// results returns a batch answer's results.
func results(t *testing.T, body map[string]any) []map[string]any {
	t.Helper()
	raw, ok := body["results"].([]any)
	require.True(t, ok, "results in %v", body)
	out := make([]map[string]any, len(raw))
	for i, r := range raw {
		out[i] = r.(map[string]any)
	}
	return out
}

// runCount is how many runs demo/dev holds.
func runCount(t *testing.T, st *store.Store) int {
	t.Helper()
	runs, _, err := st.Runs().ListRuns(context.Background(), store.RunFilter{Project: "demo", Domain: "dev", Limit: 500})
	require.NoError(t, err)
	return len(runs)
}

// runsStartTasks returns the payloads of the runs:start messages pending on
// the scheduler queue, and how many other messages are pending there.
func runsStartTasks(t *testing.T, f *fixture) ([]queue.RunsPayload, int) {
	t.Helper()
	insp := asynq.NewInspector(f.redis)
	t.Cleanup(func() { insp.Close() })
	tasks, err := insp.ListPendingTasks(queue.Scheduler, asynq.PageSize(1000))
	require.NoError(t, err)
	var out []queue.RunsPayload
	others := 0
	for _, task := range tasks {
		if task.Type != queue.TypeRunsStart {
			others++
			continue
		}
		var p queue.RunsPayload
		require.NoError(t, json.Unmarshal(task.Payload, &p))
		out = append(out, p)
	}
	return out, others
}

// A batch of valid items creates each run (QUEUED, root a0), answers them in
// order and tells the scheduler in one runs:start message. Sent again, the
// items with an idempotency_key answer with their first run, not created.
func TestCreateRunsCreatesEachItem(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	body := batchBody(`{"name":"b1","spec":`+okSpec+`}`, `{"spec":`+okSpec+`,"idempotency_key":"k2"}`,
		`{"name":"b3","spec":`+okSpec+`,"idempotency_key":"k3"}`)
	status, _, out := f.do(t, http.MethodPost, batchPath, body)
	require.Equal(t, http.StatusOK, status, out)
	res := results(t, out)
	require.Len(t, res, 3)
	var names []string
	for i, r := range res {
		require.Nil(t, r["error"], i)
		require.Equal(t, true, r["created"], i)
		run := r["run"].(map[string]any)
		require.Equal(t, "QUEUED", run["phase"])
		require.Equal(t, "a0", run["actions"].([]any)[0].(map[string]any)["name"])
		names = append(names, run["name"].(string))
		status, _, got := f.do(t, http.MethodGet, runsPath+"/"+names[i], "")
		require.Equal(t, http.StatusOK, status, got)
	}
	require.Equal(t, "b1", names[0])
	require.Equal(t, "b3", names[2])
	started, others := runsStartTasks(t, f)
	require.Equal(t, []queue.RunsPayload{{Project: "demo", Domain: "dev", Runs: names}}, started)
	require.Zero(t, others, "one message for the batch, no run:start")

	status, _, out = f.do(t, http.MethodPost, batchPath, body)
	require.Equal(t, http.StatusOK, status, out)
	res = results(t, out)
	require.Equal(t, float64(http.StatusConflict), res[0]["error"].(map[string]any)["status"], "b1 has no key: taken")
	for i := 1; i < 3; i++ {
		require.Equal(t, false, res[i]["created"], i)
		require.Equal(t, names[i], res[i]["run"].(map[string]any)["name"], i)
	}
	require.Equal(t, 3, runCount(t, f.store))
}

// Items that fail their checks answer with CreateRun's problem at their
// index and write nothing; the valid ones around them are created.
func TestCreateRunsMixedItems(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, p := f.do(t, http.MethodPost, runsPath, `{"name":"taken","spec":`+okSpec+`}`)
	require.Equal(t, http.StatusCreated, status, p)
	items := []struct {
		item   string
		status int    // 0: created
		field  string // the first field the problem names
	}{
		{`{"name":"ok1","spec":` + okSpec + `}`, 0, ""},
		{`{"name":"bad1","spec":{"steps":[{"name":"a","plugin":"docker","command":"x"}]}}`, 400, "spec.steps[0].plugin"},
		{`{"name":"bad2","spec":{"steps":[{"name":"a","command":"x","replicas":"three"}]}}`, 400, "spec.steps[0].replicas"},
		{`{"name":"bad3","spec":` + okSpec + `,"retries":3}`, 400, ""},
		{`{"name":"Bad Name","spec":` + okSpec + `}`, 422, "name"},
		{`{"name":"taken","spec":` + okSpec + `}`, 409, ""},
		{`{"name":"ok1","spec":` + okSpec + `}`, 409, ""},
		{`{"name":"bad4"}`, 422, "spec"},
		{`{"name":"bad5","workflow":{"name":"nope"}}`, 422, "workflow"},
		{`{"name":"ok2","spec":` + okSpec + `}`, 0, ""},
	}
	var bodies []string
	for _, it := range items {
		bodies = append(bodies, it.item)
	}
	status, _, out := f.do(t, http.MethodPost, batchPath, batchBody(bodies...))
	require.Equal(t, http.StatusOK, status, out)
	res := results(t, out)
	require.Len(t, res, len(items))
	for i, it := range items {
		if it.status == 0 {
			require.Nil(t, res[i]["error"], "item %d", i)
			require.Equal(t, true, res[i]["created"], "item %d", i)
			continue
		}
		require.Nil(t, res[i]["run"], "item %d", i)
		p := res[i]["error"].(map[string]any)
		require.Equal(t, float64(it.status), p["status"], "item %d: %v", i, p)
		require.NotEmpty(t, p["title"], "item %d", i)
		require.NotEmpty(t, p["detail"], "item %d", i)
		if it.field != "" {
			require.Equal(t, it.field, fields(p)[0], "item %d: %v", i, p)
		}
	}
	require.Equal(t, 3, runCount(t, f.store), "taken, ok1 and ok2")
	for _, name := range []string{"bad1", "bad2", "bad3", "bad4"} {
		status, _, _ := f.do(t, http.MethodGet, runsPath+"/"+name, "")
		require.Equal(t, http.StatusNotFound, status, name)
	}
	started, _ := runsStartTasks(t, f)
	require.Equal(t, []queue.RunsPayload{{Project: "demo", Domain: "dev", Runs: []string{"ok1", "ok2"}}}, started)
}

// A body that is not a batch — over 1,000 items, none, no runs, not JSON —
// is a 400 problem+json, and creates nothing.
func TestCreateRunsRejectsBadBatches(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	item := `{"spec":` + okSpec + `}`
	tooMany := batchBody(strings.Repeat(item+",", 1000) + item)
	cases := map[string]struct{ body, field string }{
		"1001 items":    {tooMany, "runs"},
		"no items":      {`{"runs":[]}`, "runs"},
		"no runs":       {`{}`, "runs"},
		"runs not list": {`{"runs":{"a":1}}`, "runs"},
		"item not obj":  {`{"runs":[1]}`, "runs[0]"},
		"unknown field": {`{"runs":[` + item + `],"dry_run":true}`, ""},
		"not JSON":      {`{"runs":[`, ""},
		"NUL":           {batchBody(`{"name":"a\u0000","spec":` + okSpec + `}`), "runs[0].name"},
	}
	for name, c := range cases {
		status, hdr, p := f.do(t, http.MethodPost, batchPath, c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", name, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), name)
		if c.field != "" {
			require.Equal(t, c.field, fields(p)[0], "%s: %v", name, p)
		}
	}
	require.Zero(t, runCount(t, f.store))
}

// Creating runs needs a writer: a reader is 403, no token 401; a writer
// scoped to another project sees 404.
func TestCreateRunsNeedsAWriter(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := newAuthTokens(t, f.store)
	body := batchBody(`{"spec":` + okSpec + `}`)
	status, _, p := f.doAs(t, tok.reader, http.MethodPost, batchPath, body)
	require.Equal(t, http.StatusForbidden, status, p)
	status, _, p = f.doAs(t, "", http.MethodPost, batchPath, body)
	require.Equal(t, http.StatusUnauthorized, status, p)
	status, _, p = f.doAs(t, tok.otherProject, http.MethodPost, batchPath, body)
	require.Equal(t, http.StatusNotFound, status, p)
	require.Zero(t, runCount(t, f.store))
	status, _, p = f.doAs(t, tok.writer, http.MethodPost, batchPath, body)
	require.Equal(t, http.StatusOK, status, p)
	require.Equal(t, 1, runCount(t, f.store))
}

// "batch" stays a run name: only POST on .../runs/batch is the batch; the
// run's own routes reach the run.
func TestARunMayBeNamedBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, p := f.do(t, http.MethodPost, runsPath, `{"name":"batch","spec":`+okSpec+`}`)
	require.Equal(t, http.StatusCreated, status, p)
	status, _, got := f.do(t, http.MethodGet, batchPath, "")
	require.Equal(t, http.StatusOK, status, got)
	require.Equal(t, "batch", got["name"])
	status, _, got = f.do(t, http.MethodGet, batchPath+"/actions/a0", "")
	require.Equal(t, http.StatusOK, status, got)
	status, _, got = f.do(t, http.MethodPut, batchPath, "")
	require.Equal(t, http.StatusMethodNotAllowed, status, got)
	status, _, got = f.do(t, http.MethodPost, batchPath+"/abort", "")
	require.Equal(t, http.StatusAccepted, status, got)
	require.Equal(t, "ABORTED", got["phase"])
}

// BenchmarkCreateRuns20k times accepting 20,000 runs as 20 batch requests
// of 1,000 (one step each), sent one after another to the api on the dev
// Postgres and Redis (the scheduler is not running). The target is 5 s.
func BenchmarkCreateRuns20k(b *testing.B) {
	f := newFixture(b)
	item := `{"spec":` + okSpec + `}`
	body := batchBody(strings.Repeat(item+",", 999) + item)
	for b.Loop() {
		for range 20 {
			req, err := http.NewRequest(http.MethodPost, f.srv.URL+batchPath, strings.NewReader(body))
			require.NoError(b, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testAdminToken)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(b, err)
			_, err = io.Copy(io.Discard, resp.Body)
			require.NoError(b, err)
			resp.Body.Close()
			require.Equal(b, http.StatusOK, resp.StatusCode)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/20k-runs")
}
