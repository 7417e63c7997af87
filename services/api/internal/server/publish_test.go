package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

const eventsPath = "/v1/projects/demo/domains/dev/events"

// publish publishes an event and returns its answer, which must be a 202.
func publish(t *testing.T, f *fixture, body string) map[string]any {
	t.Helper()
	status, _, out := f.do(t, http.MethodPost, eventsPath, body)
	require.Equal(t, http.StatusAccepted, status, out)
	return out
}

// strs is a JSON array of strings as []string.
func strs(v any) []string {
	out := []string{}
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// startedRuns lists the runs named by the run:start and runs:start
// messages pending on the scheduler queue.
func startedRuns(t *testing.T, f *fixture) []string {
	t.Helper()
	insp := asynq.NewInspector(f.redis)
	defer insp.Close()
	tasks, err := insp.ListPendingTasks(queue.Scheduler, asynq.PageSize(1000))
	require.NoError(t, err)
	var names []string
	for _, task := range tasks {
		switch task.Type {
		case queue.TypeRunStart:
			var p queue.RunPayload
			require.NoError(t, json.Unmarshal(task.Payload, &p))
			names = append(names, p.Run)
		case queue.TypeRunsStart:
			var p queue.RunsPayload
			require.NoError(t, json.Unmarshal(task.Payload, &p))
			names = append(names, p.Runs...)
		}
	}
	slices.Sort(names)
	return names
}

// A published event starts one run per trigger whose filter holds, with
// the params its mappings give, typed; a trigger whose filter does not
// hold starts nothing; one whose CEL fails on the event, or whose params
// do not fit the template, records the error in its delivery and starts
// nothing. The event's record answers, and is read again by id.
func TestPublishEventStartsMatchingTriggers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pushWorkflow(t, f, ordersWorkflow)
	for _, body := range []string{
		`{"name":"big","event_key":"order.created","workflow":{"name":"orders"},"filter":"event.payload.amount > 100",
			"params":{"amount":"event.payload.amount * 2.0","rush":"event.payload.rush","order":"event.payload"}}`,
		`{"name":"small","event_key":"order.created","workflow":{"name":"orders"},"filter":"event.payload.amount < 10",
			"params":{"amount":"event.payload.amount"}}`,
		`{"name":"broken","event_key":"order.created","workflow":{"name":"orders"},"filter":"event.payload.missing > 1",
			"params":{"amount":"1"}}`,
		`{"name":"mistyped","event_key":"order.created","workflow":{"name":"orders"},"params":{"amount":"event.payload.note"}}`,
		`{"name":"elsewhere","event_key":"order.paid","workflow":{"name":"orders"},"params":{"amount":"1"}}`,
	} {
		createTrigger(t, f, body)
	}

	ev := publish(t, f, `{"key":"order.created","id":"ev-1","payload":{"amount":150,"rush":true,"note":"n"}}`)
	run := domain.TriggeredRunName("big", "ev-1")
	require.Equal(t, "ev-1", ev["id"])
	require.Equal(t, "order.created", ev["key"])
	require.Equal(t, map[string]any{"amount": float64(150), "rush": true, "note": "n"}, ev["payload"])
	require.Equal(t, []string{run}, strs(ev["runs"]))
	deliveries := map[string]map[string]any{}
	for _, d := range ev["deliveries"].([]any) {
		deliveries[d.(map[string]any)["trigger"].(string)] = d.(map[string]any)
	}
	require.Len(t, deliveries, 4, "one per trigger of the key")
	require.Equal(t, map[string]any{"trigger": "big", "run": run}, deliveries["big"])
	require.Equal(t, map[string]any{"trigger": "small"}, deliveries["small"])
	require.Equal(t, "filter: no such key: missing", deliveries["broken"]["error"])
	require.NotContains(t, deliveries["broken"], "run")
	require.Contains(t, deliveries["mistyped"]["error"], "params.amount: must be a number")

	status, _, got := f.do(t, http.MethodGet, runsPath+"/"+run, "")
	require.Equal(t, http.StatusOK, status, got)
	require.Equal(t, "big", got["trigger"])
	require.Equal(t, "ev-1", got["event_id"])
	require.Equal(t, map[string]any{"name": "orders", "version": float64(1)}, got["workflow"])
	require.Equal(t, map[string]any{"amount": float64(300), "rush": true,
		"order": map[string]any{"amount": float64(150), "rush": true, "note": "n"}}, got["params"])
	require.Equal(t, 1, runCount(t, f.store), "only the matching trigger started a run")
	require.Equal(t, []string{run}, startedRuns(t, f))

	status, _, rec := f.do(t, http.MethodGet, eventsPath+"/ev-1", "")
	require.Equal(t, http.StatusOK, status, rec)
	require.Equal(t, ev, rec)
	status, _, p := f.do(t, http.MethodGet, eventsPath+"/ev-2", "")
	require.Equal(t, http.StatusNotFound, status, p)
	require.Equal(t, "not_found", p["code"])
	for _, id := range []string{"a%00", "%FF"} {
		status, _, p = f.do(t, http.MethodGet, eventsPath+"/"+id, "")
		require.Equal(t, http.StatusNotFound, status, "%s: %v", id, p)
	}
}

// The same id published again starts nothing new: the answer is the first
// publication's record, whatever the second carried.
func TestPublishEventIsIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pushWorkflow(t, f, ordersWorkflow)
	createTrigger(t, f, `{"name":"all","event_key":"k","workflow":{"name":"orders"},"params":{"amount":"event.payload.n"}}`)
	first := publish(t, f, `{"key":"k","id":"same","payload":{"n":1}}`)
	createTrigger(t, f, `{"name":"later","event_key":"k","workflow":{"name":"orders"},"params":{"amount":"2"}}`)
	again := publish(t, f, `{"key":"k","id":"same","payload":{"n":2}}`)
	require.Equal(t, first, again)
	require.Equal(t, []string{domain.TriggeredRunName("all", "same")}, strs(again["runs"]))
	require.Equal(t, 1, runCount(t, f.store))
}

// Without an id the server makes one, and each publication is an event of
// its own; an event of a key no trigger subscribes to starts nothing.
func TestPublishEventWithoutID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pushWorkflow(t, f, ordersWorkflow)
	createTrigger(t, f, `{"name":"all","event_key":"k","workflow":{"name":"orders"},"params":{"amount":"1"}}`)
	a, b := publish(t, f, `{"key":"k"}`), publish(t, f, `{"key":"k"}`)
	require.NotEmpty(t, a["id"])
	require.NotEqual(t, a["id"], b["id"])
	require.Equal(t, map[string]any{}, a["payload"])
	require.Equal(t, []string{domain.TriggeredRunName("all", a["id"].(string))}, strs(a["runs"]))
	require.Equal(t, 2, runCount(t, f.store))

	none := publish(t, f, `{"key":"nobody","id":"x","payload":{"a":1}}`)
	require.Empty(t, none["runs"])
	require.Empty(t, none["deliveries"])
	require.Equal(t, 2, runCount(t, f.store))
}

// A trigger whose template is deleted, or whose run's name is taken,
// fails its delivery, not the publication.
func TestPublishEventFailedDeliveries(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pushWorkflow(t, f, ordersWorkflow)
	pushWorkflow(t, f, `{"name":"gone","spec":{"steps":[{"name":"a","command":"true"}]}}`)
	createTrigger(t, f, `{"name":"ok","event_key":"k","workflow":{"name":"orders"},"params":{"amount":"1"}}`)
	createTrigger(t, f, `{"name":"taken","event_key":"k","workflow":{"name":"orders"},"params":{"amount":"1"}}`)
	createTrigger(t, f, `{"name":"deleted","event_key":"k","workflow":{"name":"gone"}}`)
	status, _, _ := f.do(t, http.MethodDelete, workflowsPath+"/gone", "")
	require.Equal(t, http.StatusNoContent, status)
	taken := domain.TriggeredRunName("taken", "ev")
	status, _, out := f.do(t, http.MethodPost, runsPath, `{"name":"`+taken+`","spec":{"steps":[{"name":"a","command":"true"}]}}`)
	require.Equal(t, http.StatusCreated, status, out)

	ev := publish(t, f, `{"key":"k","id":"ev"}`)
	require.Equal(t, []string{domain.TriggeredRunName("ok", "ev")}, strs(ev["runs"]))
	errs := map[string]any{}
	for _, d := range ev["deliveries"].([]any) {
		errs[d.(map[string]any)["trigger"].(string)] = d.(map[string]any)["error"]
	}
	require.Equal(t, map[string]any{"deleted": "workflow template gone does not exist",
		"ok": nil, "taken": "run name " + taken + " is taken by a run this event did not start"}, errs)
	status, _, rec := f.do(t, http.MethodGet, eventsPath+"/ev", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, ev, rec, "the record holds the failure")
	require.Equal(t, 2, runCount(t, f.store))
}

// A body that cannot be an event is refused naming its field: 400 for
// what the schema refuses, 422 for a payload over 256 KiB.
func TestPublishEventRejects(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cases := []struct {
		name, body string
		status     int
		field      string
	}{
		{"no key", `{"payload":{}}`, 400, "key"},
		{"an empty key", `{"key":""}`, 400, "key"},
		{"a payload that is not an object", `{"key":"k","payload":[1]}`, 400, "payload"},
		{"an empty id", `{"key":"k","id":""}`, 400, "id"},
		{"an unknown field", `{"key":"k","data":{}}`, 400, ""},
		{"a payload over 256 KiB", `{"key":"k","payload":{"big":"` + strings.Repeat("x", 256<<10) + `"}}`, 422, "payload"},
	}
	for _, c := range cases {
		status, hdr, p := f.do(t, http.MethodPost, eventsPath, c.body)
		require.Equal(t, c.status, status, "%s: %v", c.name, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), c.name)
		if c.field != "" {
			require.Contains(t, fields(p), c.field, "%s: %v", c.name, p)
		}
	}
}

// The same event id published at once by 20 clients starts exactly one
// run per matching trigger, and every answer lists the same runs.
func TestPublishEventConcurrently(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pushWorkflow(t, f, ordersWorkflow)
	createTrigger(t, f, `{"name":"a","event_key":"k","workflow":{"name":"orders"},"params":{"amount":"event.payload.n"}}`)
	createTrigger(t, f, `{"name":"b","event_key":"k","workflow":{"name":"orders"},"filter":"event.payload.n > 0",
		"params":{"amount":"1"}}`)
	createTrigger(t, f, `{"name":"c","event_key":"k","workflow":{"name":"orders"},"filter":"event.payload.n < 0",
		"params":{"amount":"1"}}`)
	const clients = 20
	answers := make([]map[string]any, clients)
	statuses := make([]int, clients)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			<-start
			statuses[i], _, answers[i] = f.do(t, http.MethodPost, eventsPath, `{"key":"k","id":"once","payload":{"n":5}}`)
		})
	}
	close(start)
	wg.Wait()
	want := []string{domain.TriggeredRunName("a", "once"), domain.TriggeredRunName("b", "once")}
	for i := range clients {
		require.Equal(t, http.StatusAccepted, statuses[i], answers[i])
		require.Equal(t, want, strs(answers[i]["runs"]), "answer %d", i)
		require.Equal(t, answers[0], answers[i], "answer %d is the one record", i)
	}
	runs, _, err := f.store.Runs().ListRuns(context.Background(), store.RunFilter{Project: "demo", Domain: "dev"})
	require.NoError(t, err)
	var names []string
	for _, r := range runs {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	require.Equal(t, want, names, "exactly one run per matching trigger")
}

// An event id is free text: read back by id, path-escaped.
func TestGetPublishedEventEscapedID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, id := range []string{"a b", "orders/42", "ünï?#%"} {
		body, err := json.Marshal(map[string]any{"key": "k", "id": id})
		require.NoError(t, err)
		publish(t, f, string(body))
		status, _, rec := f.do(t, http.MethodGet, eventsPath+"/"+url.PathEscape(id), "")
		require.Equal(t, http.StatusOK, status, "%q: %v", id, rec)
		require.Equal(t, id, rec["id"])
	}
}
