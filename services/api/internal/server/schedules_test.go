package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

const schedulesPath = "/v1/projects/demo/domains/dev/schedules"

// newScheduleFixture is a fixture holding the template etl: one noop step
// and a number param n (default 1) and a string param env.
func newScheduleFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	status, _, body := f.do(t, http.MethodPost, workflowsPath, `{"name":"etl",
		"params":[{"name":"n","type":"number","default":1},{"name":"env","type":"string"}],
		"spec":{"steps":[{"name":"a","plugin":"noop"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	return f
}

func TestCreateScheduleShowsItsDefaultsAndNextTimes(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	before := time.Now().UTC()
	status, _, sc := f.do(t, http.MethodPost, schedulesPath,
		`{"name":"nightly","workflow":{"name":"etl"},"params":{"env":"prod"},"cron":"0 3 * * *","timezone":"Europe/Berlin"}`)
	require.Equal(t, http.StatusCreated, status, sc)
	require.Equal(t, "skip", sc["overlap"], "Temporal's default overlap policy")
	require.Equal(t, "8760h0m0s", sc["catchup_window"], "Temporal's default catch-up window, one year")
	require.Equal(t, false, sc["paused"])
	require.Equal(t, map[string]any{"env": "prod"}, sc["params"], "the params as given")
	require.Empty(t, sc["recent_runs"])
	require.EqualValues(t, 0, sc["buffered"])
	next := sc["next_run_times"].([]any)
	require.Len(t, next, 5)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	prev := before
	for _, s := range next {
		at, err := time.Parse(time.RFC3339, s.(string))
		require.NoError(t, err)
		require.True(t, at.After(prev))
		require.Equal(t, 3, at.In(berlin).Hour(), "03:00 on Berlin's wall clock")
		prev = at
	}

	status, _, p := f.do(t, http.MethodPost, schedulesPath, `{"name":"nightly","workflow":{"name":"etl"},"interval":"1h"}`)
	require.Equal(t, http.StatusConflict, status, p)
	require.Equal(t, "conflict", p["code"])

	status, _, got := f.do(t, http.MethodGet, schedulesPath+"/nightly", "")
	require.Equal(t, http.StatusOK, status, got)
	require.Equal(t, "0 3 * * *", got["cron"])
	require.Equal(t, "Europe/Berlin", got["timezone"])
	require.Equal(t, map[string]any{"name": "etl"}, got["workflow"])
}

func TestCreateScheduleRejectsBadFields(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	cases := []struct {
		name, body, field string
	}{
		{"a cron that never fires", `"cron":"0 0 30 2 *"`, "cron"},
		{"not a cron", `"cron":"every day"`, "cron"},
		{"@every is an interval", `"cron":"@every 1m"`, "cron"},
		{"neither cron nor interval", `"timezone":"UTC"`, "cron"},
		{"both cron and interval", `"cron":"@hourly","interval":"1h"`, "interval"},
		{"an unknown timezone", `"cron":"@daily","timezone":"Mars/Olympus"`, "timezone"},
		{"an interval under 1s", `"interval":"500ms"`, "interval"},
		{"an interval of a fraction of a second", `"interval":"1500ms"`, "interval"},
		{"a negative jitter", `"interval":"1m","jitter":"-1s"`, "jitter"},
		{"a zero catch-up window", `"interval":"1m","catchup_window":"0s"`, "catchup_window"},
		{"a template that does not exist", `"interval":"1m","workflow":{"name":"nope"}`, "workflow"},
		{"a template version that does not exist", `"interval":"1m","workflow":{"name":"etl","version":2}`, "workflow"},
		{"an unknown param", `"interval":"1m","params":{"x":1}`, "params.x"},
		{"a param of the wrong type", `"interval":"1m","params":{"n":"three"}`, "params.n"},
	}
	for _, c := range cases {
		body := `{"name":"s",` + c.body
		if !strings.Contains(c.body, `"workflow"`) {
			body += `,"workflow":{"name":"etl"}`
		}
		status, _, p := f.do(t, http.MethodPost, schedulesPath, body+"}")
		require.Equal(t, http.StatusUnprocessableEntity, status, "%s: %v", c.name, p)
		require.Contains(t, fields(p), c.field, "%s: %v", c.name, p)
	}
	status, _, p := f.do(t, http.MethodPost, schedulesPath,
		fmt.Sprintf(`{"name":"%s","workflow":{"name":"etl"},"interval":"1m"}`, longName(domain.MaxScheduleNameLen+1)))
	require.Equal(t, http.StatusBadRequest, status, "the schema bounds a schedule name: %v", p)
	status, _, p = f.do(t, http.MethodPost, schedulesPath, `{"name":"s","workflow":{"name":"etl"},"interval":"1m","overlap":"terminate"}`)
	require.Equal(t, http.StatusBadRequest, status, "the schema lists the overlap policies: %v", p)

	list, _, err := f.store.Schedules().ListSchedules(context.Background(), "demo", "dev", "", 0)
	require.NoError(t, err)
	require.Empty(t, list, "nothing is written for a refused schedule")
}

func longName(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	return string(b)
}

func TestUnknownScheduleIs404(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/ghost", ""},
		{http.MethodPatch, "/ghost", `{"paused":true}`},
		{http.MethodDelete, "/ghost", ""},
		{http.MethodPost, "/ghost/pause", ""},
		{http.MethodPost, "/ghost/unpause", ""},
		{http.MethodPost, "/ghost/trigger", ""},
		{http.MethodPost, "/ghost/backfill", `{"start":"2026-01-01T00:00:00Z","end":"2026-01-02T00:00:00Z"}`},
	} {
		status, _, p := f.do(t, c.method, schedulesPath+c.path, c.body)
		require.Equal(t, http.StatusNotFound, status, "%s %s: %v", c.method, c.path, p)
		require.Equal(t, "not_found", p["code"])
	}
}

// Pause stops the automatic times (no next times); unpause starts them
// from now, not from where they stopped.
func TestPauseAndUnpause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newScheduleFixture(t)
	key := store.ScheduleKey{Project: "demo", Domain: "dev", Name: "s"}
	status, _, sc := f.do(t, http.MethodPost, schedulesPath, `{"name":"s","workflow":{"name":"etl"},"interval":"1h","paused":true}`)
	require.Equal(t, http.StatusCreated, status, sc)
	require.Equal(t, true, sc["paused"])
	require.Empty(t, sc["next_run_times"], "none while paused")
	created, err := f.store.Schedules().GetSchedule(ctx, key)
	require.NoError(t, err)

	status, _, sc = f.do(t, http.MethodPost, schedulesPath+"/s/unpause", "")
	require.Equal(t, http.StatusOK, status, sc)
	require.Equal(t, false, sc["paused"])
	require.Len(t, sc["next_run_times"], 5)
	unpaused, err := f.store.Schedules().GetSchedule(ctx, key)
	require.NoError(t, err)
	require.True(t, unpaused.CursorAt.After(created.CursorAt), "the times while paused are not caught up")
	require.NotNil(t, unpaused.CheckAt, "the firing loop decides it anew")

	status, _, sc = f.do(t, http.MethodPost, schedulesPath+"/s/pause", "")
	require.Equal(t, http.StatusOK, status, sc)
	require.Equal(t, true, sc["paused"])
	require.Empty(t, sc["next_run_times"])
	paused, err := f.store.Schedules().GetSchedule(ctx, key)
	require.NoError(t, err)
	require.True(t, paused.Paused)
	require.True(t, paused.CursorAt.Equal(unpaused.CursorAt), "a pause keeps the cursor")
}

// A trigger records this second, with its overlap policy; a backfill the
// schedule's times of its range; each answers what it recorded.
func TestTriggerAndBackfillRecordTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newScheduleFixture(t)
	key := store.ScheduleKey{Project: "demo", Domain: "dev", Name: "s"}
	status, _, sc := f.do(t, http.MethodPost, schedulesPath, `{"name":"s","workflow":{"name":"etl"},"cron":"@hourly"}`)
	require.Equal(t, http.StatusCreated, status, sc)

	before := time.Now().UTC().Truncate(time.Second)
	status, _, a := f.do(t, http.MethodPost, schedulesPath+"/s/trigger", `{"overlap":"allow_all"}`)
	require.Equal(t, http.StatusAccepted, status, a)
	recorded := a["scheduled_times"].([]any)
	require.Len(t, recorded, 1)
	at, err := time.Parse(time.RFC3339, recorded[0].(string))
	require.NoError(t, err)
	require.False(t, at.Before(before))
	require.Equal(t, at, at.Truncate(time.Second), "a trigger is scheduled at a whole second")
	status, _, a = f.do(t, http.MethodPost, schedulesPath+"/s/trigger", "")
	require.Equal(t, http.StatusAccepted, status, a)

	status, _, a = f.do(t, http.MethodPost, schedulesPath+"/s/backfill",
		`{"start":"2026-03-01T00:30:00Z","end":"2026-03-01T03:00:00Z","overlap":"buffer_all"}`)
	require.Equal(t, http.StatusAccepted, status, a)
	require.Equal(t, []any{"2026-03-01T01:00:00Z", "2026-03-01T02:00:00Z", "2026-03-01T03:00:00Z"}, a["scheduled_times"],
		"the range is inclusive")

	got, err := f.store.Schedules().GetSchedule(ctx, key)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(got.Pending), 4)
	require.Equal(t, domain.OverlapBufferAll, got.Pending[0].Overlap)
	require.True(t, got.Pending[0].At.Equal(time.Date(2026, 3, 1, 1, 0, 0, 0, time.UTC)), "pending times are by time")
	last := got.Pending[len(got.Pending)-1]
	require.True(t, last.At.Equal(at) || last.At.After(at))
	require.NotNil(t, got.CheckAt)

	for _, c := range []struct{ name, body string }{
		{"end before start", `{"start":"2026-03-02T00:00:00Z","end":"2026-03-01T00:00:00Z"}`},
		{"more than 10,000 times", `{"start":"2020-01-01T00:00:00Z","end":"2022-01-01T00:00:00Z"}`},
	} {
		status, _, p := f.do(t, http.MethodPost, schedulesPath+"/s/backfill", c.body)
		require.Equal(t, http.StatusUnprocessableEntity, status, "%s: %v", c.name, p)
		require.Equal(t, []string{"end"}, fields(p), c.name)
	}
	after, err := f.store.Schedules().GetSchedule(ctx, key)
	require.NoError(t, err)
	require.Equal(t, got.Pending, after.Pending, "a refused backfill records nothing")
}

// PATCH merges the fields given and checks the result again; a refused
// change changes nothing.
func TestUpdateScheduleMergesAndRevalidates(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	status, _, sc := f.do(t, http.MethodPost, schedulesPath,
		`{"name":"s","workflow":{"name":"etl"},"params":{"n":2},"interval":"90s","jitter":"5s","overlap":"buffer_all"}`)
	require.Equal(t, http.StatusCreated, status, sc)

	status, _, sc = f.do(t, http.MethodPatch, schedulesPath+"/s", `{"cron":"*/5 * * * *","timezone":"Asia/Kolkata"}`)
	require.Equal(t, http.StatusOK, status, sc)
	require.Equal(t, "*/5 * * * *", sc["cron"])
	require.Nil(t, sc["interval"], "a cron clears the interval")
	require.Equal(t, "5s", sc["jitter"], "fields not given keep their values")
	require.Equal(t, "buffer_all", sc["overlap"])
	require.Equal(t, map[string]any{"n": 2.0}, sc["params"])

	for _, c := range []struct{ name, body, field string }{
		{"an interval under 1s", `{"interval":"10ms"}`, "interval"},
		{"an unknown timezone", `{"timezone":"Nowhere/Land"}`, "timezone"},
		{"an unknown template", `{"workflow":{"name":"nope"}}`, "workflow"},
		{"params that do not fit", `{"params":{"n":true}}`, "params.n"},
	} {
		status, _, p := f.do(t, http.MethodPatch, schedulesPath+"/s", c.body)
		require.Equal(t, http.StatusUnprocessableEntity, status, "%s: %v", c.name, p)
		require.Contains(t, fields(p), c.field, c.name)
	}
	status, _, sc = f.do(t, http.MethodGet, schedulesPath+"/s", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "*/5 * * * *", sc["cron"], "refused changes change nothing")
	require.Equal(t, "Asia/Kolkata", sc["timezone"])

	status, _, sc = f.do(t, http.MethodPatch, schedulesPath+"/s", `{"interval":"1h","jitter":"","paused":true}`)
	require.Equal(t, http.StatusOK, status, sc)
	require.Nil(t, sc["cron"], "an interval clears the cron")
	require.Nil(t, sc["jitter"], "an empty jitter clears it")
	require.Equal(t, true, sc["paused"])
}

// GET shows the latest 10 runs of the schedule, newest first, with their
// phase; list pages by name; delete keeps the runs.
func TestScheduleRecentRunsListAndDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newScheduleFixture(t)
	for _, name := range []string{"a", "b", "c"} {
		status, _, sc := f.do(t, http.MethodPost, schedulesPath, `{"name":"`+name+`","workflow":{"name":"etl"},"interval":"1m"}`)
		require.Equal(t, http.StatusCreated, status, sc)
	}
	tpl, err := f.store.Templates().GetTemplate(ctx, store.TemplateKey{Project: "demo", Domain: "dev", Name: "etl"}, 0)
	require.NoError(t, err)
	base := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	var runs []store.NewRun
	for i := range 12 {
		at := base.Add(time.Duration(i) * time.Minute)
		runs = append(runs, store.NewRun{Key: domain.RunKey{Project: "demo", Domain: "dev", Run: domain.ScheduledRunName("b", at)},
			Spec: tpl.Spec, Params: map[string]any{"n": 1.0},
			Origin: store.RunOrigin{WorkflowName: "etl", WorkflowVersion: 1, ScheduleName: "b", ScheduledAt: at}})
	}
	res, err := f.store.Runs().CreateRuns(ctx, runs)
	require.NoError(t, err)
	require.NoError(t, res[0].Err)

	status, _, sc := f.do(t, http.MethodGet, schedulesPath+"/b", "")
	require.Equal(t, http.StatusOK, status, sc)
	recent := sc["recent_runs"].([]any)
	require.Len(t, recent, 10)
	first := recent[0].(map[string]any)
	require.Equal(t, "b-20260101t101100z", first["name"])
	require.Equal(t, "2026-01-01T10:11:00Z", first["scheduled_at"])
	require.Equal(t, "QUEUED", first["phase"])

	status, _, run := f.do(t, http.MethodGet, runsPath+"/b-20260101t101100z", "")
	require.Equal(t, http.StatusOK, status, run)
	require.Equal(t, "b", run["schedule"])
	require.Equal(t, "2026-01-01T10:11:00Z", run["scheduled_at"])

	status, _, page := f.do(t, http.MethodGet, schedulesPath+"?limit=2", "")
	require.Equal(t, http.StatusOK, status, page)
	require.Len(t, page["schedules"], 2)
	require.Equal(t, "b", page["next_cursor"])
	require.Len(t, page["schedules"].([]any)[1].(map[string]any)["recent_runs"], 10)
	status, _, page = f.do(t, http.MethodGet, schedulesPath+"?limit=2&cursor=b", "")
	require.Equal(t, http.StatusOK, status, page)
	require.Len(t, page["schedules"], 1)
	require.Nil(t, page["next_cursor"])

	status, _, _ = f.do(t, http.MethodDelete, schedulesPath+"/b", "")
	require.Equal(t, http.StatusNoContent, status)
	status, _, _ = f.do(t, http.MethodGet, schedulesPath+"/b", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _, _ = f.do(t, http.MethodGet, runsPath+"/b-20260101t101100z", "")
	require.Equal(t, http.StatusOK, status, "a deleted schedule's runs stay")
}
