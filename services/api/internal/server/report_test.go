package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

// assignA binds step a's task of a started run to a new worker and returns
// the attempt's id.
func (f *controlFixture) assignA(t *testing.T, key domain.RunKey) int64 {
	t.Helper()
	ctx := context.Background()
	w, err := f.store.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 1})
	require.NoError(t, err)
	d, err := f.store.Actions().GetAction(ctx, key.Action("a"))
	require.NoError(t, err)
	a, ok, err := storetest.AssignTask(ctx, f.store, d.Tasks[0].Task.ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	return a.ID
}

// A stopped attempt's final report carries the plugin's Abort and Finalize
// (Flyte's handleAbortAndFinalize): each is a run event in the report's
// transaction, in order, naming the attempt; the last attempt of an aborted
// step is handed to the scheduler, whose evaluation writes the ABORTED
// event after them.
func TestReportRecordsCleanupStepsInOrder(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	ctx := context.Background()
	key := f.startedRun(t)
	id := f.assignA(t, key)
	f.report(t, id, `{"state":"RUNNING"}`)
	_, err := f.store.Aborts().AbortAction(ctx, key.Action("a"), "stop", "")
	require.NoError(t, err)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.report(t, id, fmt.Sprintf(`{"state":"KILLED","cause":"aborted","cleanup":[
		{"step":"abort","at":%q,"error":"SIGTERM ignored; SIGKILL sent"},{"step":"finalize","at":%q}]}`,
		at.Format(time.RFC3339Nano), at.Add(time.Second).Format(time.RFC3339Nano)))

	evs := f.events(t, key)
	i := len(evs) - 3
	require.Equal(t, []string{"plugin_abort", "plugin_finalize", "attempt.KILLED"}, evs[i:])
	var data struct {
		At    time.Time `json:"at"`
		Error string    `json:"error"`
	}
	var attempt int64
	var raw []byte
	require.NoError(t, f.db.QueryRow(`SELECT attempt_id, data FROM run_events WHERE run_name = $1 AND type = 'plugin_abort'`,
		key.Run).Scan(&attempt, &raw))
	require.NoError(t, json.Unmarshal(raw, &data))
	require.Equal(t, id, attempt)
	require.True(t, at.Equal(data.At))
	require.Equal(t, "SIGTERM ignored; SIGKILL sent", data.Error)

	insp := asynq.NewInspector(f.redis)
	defer insp.Close()
	pending, err := insp.ListPendingTasks(queue.Scheduler)
	require.NoError(t, err)
	var evaluates int
	for _, p := range pending {
		if p.Type == queue.TypeTaskEvaluate {
			evaluates++
		}
	}
	require.Equal(t, 1, evaluates, "the abort's last attempt is evaluated: the scheduler writes the ABORTED event")
}

// An executor's code and the permanent cause are stored and shown on the
// attempt; the task shows its system-failure budget.
func TestReportPermanentFailureWithCode(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	key := f.startedRun(t)
	id := f.assignA(t, key)
	f.report(t, id, `{"state":"FAILED","cause":"permanent","code":"InvalidPluginSpec","error":"unknown plugin \"wasm\""}`)

	status, _, run := f.do(t, http.MethodGet, runsPath+"/"+key.Run+"/actions/a", "")
	require.Equal(t, http.StatusOK, status, run)
	raw, err := json.Marshal(run)
	require.NoError(t, err)
	var act api.Action
	require.NoError(t, json.Unmarshal(raw, &act))
	task := act.Tasks[0]
	require.Equal(t, domain.DefaultMaxSystemFailures, *task.MaxSystemFailures)
	require.Equal(t, 0, *task.SystemFailureCount)
	require.Equal(t, "permanent", *task.Attempts[0].Cause)
	require.Equal(t, "InvalidPluginSpec", *task.Attempts[0].Code)
}

func TestReportRejectsBadCodeAndCleanup(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	key := f.startedRun(t)
	id := f.assignA(t, key)
	path := fmt.Sprintf("/v1/attempts/%d/report", id)
	for _, body := range []string{
		`{"state":"FAILED","code":"not a code"}`,
		`{"state":"FAILED","code":"` + strings.Repeat("A", 65) + `"}`,
		`{"state":"FAILED","cause":"cosmic_ray"}`,
		`{"state":"KILLED","cleanup":[{"step":"reboot","at":"2026-01-02T03:04:05Z"}]}`,
		`{"state":"KILLED","cleanup":[{"step":"abort"}]}`,
	} {
		status, _, p := f.do(t, http.MethodPost, path, body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", body, p)
		require.Equal(t, "invalid_request", p["code"], body)
	}
	d, err := f.store.Actions().GetAction(context.Background(), key.Action("a"))
	require.NoError(t, err)
	require.Equal(t, domain.TaskAssigned, d.Tasks[0].Attempts[0].State, "a rejected report changes nothing")
}

// Iris: "if the worker reports PENDING, the controller ignores it to
// prevent regressing an ASSIGNED task": 200, proceed, nothing written; a
// state no executor reports (ASSIGNED, UNSCHEDULABLE) is still 400.
func TestReportPendingIsIgnored(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	key := f.startedRun(t)
	id := f.assignA(t, key)
	before := f.events(t, key)
	path := fmt.Sprintf("/v1/attempts/%d/report", id)
	status, _, out := f.do(t, http.MethodPost, path, `{"state":"PENDING"}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, true, out["proceed"], "the attempt goes on")
	d, err := f.store.Actions().GetAction(context.Background(), key.Action("a"))
	require.NoError(t, err)
	require.Equal(t, domain.TaskAssigned, d.Tasks[0].Attempts[0].State, "the ASSIGNED attempt does not regress")
	require.Equal(t, domain.TaskAssigned, d.Tasks[0].Task.State)
	require.Equal(t, before, f.events(t, key), "no event")
	for _, state := range []string{"ASSIGNED", "UNSCHEDULABLE", "UNSPECIFIED"} {
		status, _, p := f.do(t, http.MethodPost, path, `{"state":"`+state+`"}`)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", state, p)
	}
}

// checkReport is the handler's own check, behind the request validator.
func TestCheckReport(t *testing.T) {
	t.Parallel()
	bad := workerapi.AttemptReportCause("cosmic_ray")
	code := "not-a-code"
	long := strings.Repeat("e", maxCleanupErrorBytes+1)
	steps := []workerapi.CleanupStep{{Step: "abort", At: time.Now()}, {Step: "reboot", At: time.Now()},
		{Step: "finalize"}, {Step: "finalize", At: time.Now(), Error: &long}}
	errs := checkReport(&workerapi.ReportAttemptJSONRequestBody{Cause: &bad, Code: &code, Cleanup: &steps})
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	require.Equal(t, []string{"cause", "code", "cleanup[1].step", "cleanup[2].at", "cleanup[3].error"}, got)
	many := make([]workerapi.CleanupStep, maxCleanupSteps+1)
	require.Len(t, checkReport(&workerapi.ReportAttemptJSONRequestBody{Cleanup: &many}), 1)
	perm, ok := workerapi.AttemptReportCause(domain.CausePermanent), "MaxSystemFailuresExceeded"
	require.Empty(t, checkReport(&workerapi.ReportAttemptJSONRequestBody{Cause: &perm, Code: &ok}))
}
