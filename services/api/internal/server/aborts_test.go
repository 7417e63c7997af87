package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

// AbortAction over REST (Flyte's AbortAction: persist, then push): 202 with
// the default reason, the abort recorded and pushed under its TaskID; 409 on
// a terminal action, 404 on an unknown one.
func TestAbortActionRecordsAndPushes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	run := "r-" + uuid.NewString()[:8]
	status, _, body := f.do(t, http.MethodPost, runsPath,
		`{"name":"`+run+`","spec":{"mode":"DAG","steps":[{"name":"a","command":"sleep 600"},{"name":"b","command":"sleep 600"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: run}
	storetest.StartSteps(t, f.store, key)

	status, _, a := f.do(t, http.MethodPost, runsPath+"/"+run+"/actions/a/abort", "")
	require.Equal(t, http.StatusAccepted, status, a)
	require.Equal(t, "ABORTED", a["phase"])
	abort := a["abort"].(map[string]any)
	require.Equal(t, domain.DefaultAbortReason, abort["reason"])
	require.Equal(t, store.CauseAborted, abort["cause"])
	require.NotEmpty(t, abort["requested_at"])
	require.EqualValues(t, 0, abort["attempt_count"])

	insp := asynq.NewInspector(f.redis)
	t.Cleanup(func() { insp.Close() })
	info, err := insp.GetTaskInfo(queue.Abort, key.Action("a").String())
	require.NoError(t, err, "the abort is pushed under its TaskID")
	require.Equal(t, queue.TypeActionAbort, info.Type)

	status, _, p := f.do(t, http.MethodPost, runsPath+"/"+run+"/actions/a/abort", `{"reason":"again"}`)
	require.Equal(t, http.StatusConflict, status, p)
	require.Equal(t, "already_terminal", p["code"])
	status, _, p = f.do(t, http.MethodPost, runsPath+"/"+run+"/actions/nope/abort", "")
	require.Equal(t, http.StatusNotFound, status, p)

	status, _, got := f.do(t, http.MethodGet, runsPath+"/"+run, "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "RUNNING", got["phase"], "aborting one step leaves the run to the scheduler")
}

// GET /v1/aborts lists by state; needs_intervention is what an operator
// must look at. Attempt kills show on their attempt.
func TestListAborts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	var keys []domain.ActionKey
	for _, name := range []string{"given-up", "pending"} {
		status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"`+name+`","spec":{"steps":[{"name":"a","command":"x"}]}}`)
		require.Equal(t, http.StatusCreated, status, body)
		status, _, body = f.do(t, http.MethodPost, runsPath+"/"+name+"/abort", `{"reason":"stop `+name+`"}`)
		require.Equal(t, http.StatusAccepted, status, body)
		keys = append(keys, domain.RunKey{Project: "demo", Domain: "dev", Run: name}.Action(domain.RootActionName))
	}
	_, err := f.store.Aborts().MarkAbortAttempt(ctx, keys[0])
	require.NoError(t, err)
	require.NoError(t, f.store.Aborts().ClearAbortRequest(ctx, keys[0], store.AbortNeedsIntervention))

	status, _, list := f.do(t, http.MethodGet, "/v1/aborts?state=needs_intervention", "")
	require.Equal(t, http.StatusOK, status, list)
	aborts := list["aborts"].([]any)
	require.Len(t, aborts, 1)
	rec := aborts[0].(map[string]any)
	require.Equal(t, "action", rec["kind"])
	require.Equal(t, "given-up", rec["run"])
	require.Equal(t, "a0", rec["action"])
	require.Equal(t, "needs_intervention", rec["outcome"])
	require.Equal(t, "stop given-up", rec["reason"])
	require.EqualValues(t, 1, rec["attempt_count"])
	require.Nil(t, rec["requested_at"])

	status, _, list = f.do(t, http.MethodGet, "/v1/aborts?state=pending&limit=1", "")
	require.Equal(t, http.StatusOK, status, list)
	require.Len(t, list["aborts"], 1)
	require.Equal(t, "pending", list["aborts"].([]any)[0].(map[string]any)["run"])
	require.Nil(t, list["next_cursor"])

	status, _, list = f.do(t, http.MethodGet, "/v1/aborts?limit=1", "")
	require.Equal(t, http.StatusOK, status, list)
	require.Len(t, list["aborts"], 1)
	next := list["next_cursor"].(string)
	status, _, list = f.do(t, http.MethodGet, "/v1/aborts?limit=1&cursor="+next, "")
	require.Equal(t, http.StatusOK, status, list)
	require.Len(t, list["aborts"], 1)
	require.Nil(t, list["next_cursor"])

	status, _, run := f.do(t, http.MethodGet, runsPath+"/given-up", "")
	require.Equal(t, http.StatusOK, status)
	a0 := run["actions"].([]any)[0].(map[string]any)
	require.Equal(t, "needs_intervention", a0["abort"].(map[string]any)["outcome"], "the run shows it")

	for _, q := range []string{"?state=lost", "?cursor=!!", "?limit=0"} {
		status, _, p := f.do(t, http.MethodGet, "/v1/aborts"+q, "")
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", q, p)
	}
}

// A kill request shows on the attempt it targets.
func TestAttemptShowsKill(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	status, _, body := f.do(t, http.MethodPost, runsPath, `{"name":"k","spec":{"steps":[{"name":"a","command":"x"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: "k"}
	storetest.StartSteps(t, f.store, key)
	w, err := f.store.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 1})
	require.NoError(t, err)
	step, err := f.store.Actions().GetAction(ctx, key.Action("a"))
	require.NoError(t, err)
	at, ok, err := storetest.AssignTask(ctx, f.store, step.Tasks[0].Task.ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, f.store.Aborts().RequestAttemptKill(ctx, at.ID, store.CausePreempted))

	status, _, got := f.do(t, http.MethodGet, runsPath+"/k/actions/a", "")
	require.Equal(t, http.StatusOK, status, got)
	attempt := got["tasks"].([]any)[0].(map[string]any)["attempts"].([]any)[0].(map[string]any)
	kill := attempt["kill"].(map[string]any)
	require.Equal(t, store.CausePreempted, kill["cause"])
	require.NotEmpty(t, kill["requested_at"])
}

// GET /v1/aborts?project=&domain= keeps one project's, one domain's or one
// project/domain's aborts: the dashboard's page of a project/domain lists
// no other's. A name that is not one is a 400.
func TestListAbortsScoped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, scope := range []string{"demo/dev", "demo/prod", "other/dev"} {
		path := "/v1/projects/" + strings.Replace(scope, "/", "/domains/", 1) + "/runs"
		status, _, body := f.do(t, http.MethodPost, path, `{"name":"r","spec":{"steps":[{"name":"a","command":"x"}]}}`)
		require.Equal(t, http.StatusCreated, status, body)
		status, _, body = f.do(t, http.MethodPost, path+"/r/abort", "")
		require.Equal(t, http.StatusAccepted, status, body)
	}
	for q, want := range map[string][]string{
		"":                             {"demo/dev", "demo/prod", "other/dev"},
		"?project=demo":                {"demo/dev", "demo/prod"},
		"?domain=dev":                  {"demo/dev", "other/dev"},
		"?project=demo&domain=dev":     {"demo/dev"},
		"?project=other&domain=prod":   nil,
		"?project=demo&state=pending":  {"demo/dev", "demo/prod"},
		"?project=nobody&domain=dev":   nil,
		"?domain=prod&state=delivered": nil,
	} {
		status, _, list := f.do(t, http.MethodGet, "/v1/aborts"+q, "")
		require.Equal(t, http.StatusOK, status, "%s: %v", q, list)
		var got []string
		for _, a := range list["aborts"].([]any) {
			rec := a.(map[string]any)
			got = append(got, rec["project"].(string)+"/"+rec["domain"].(string))
		}
		require.ElementsMatch(t, want, got, q)
	}
	for _, q := range []string{"?project=Not_A_Name", "?domain=-dev"} {
		status, _, p := f.do(t, http.MethodGet, "/v1/aborts"+q, "")
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", q, p)
	}
}
