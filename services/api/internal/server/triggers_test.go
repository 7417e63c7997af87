package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const triggersPath = "/v1/projects/demo/domains/dev/triggers"

// ordersWorkflow is a template with a required number param, a boolean
// with a default, and a json one.
const ordersWorkflow = `{"name":"orders","params":[{"name":"amount","type":"number","required":true},
	{"name":"rush","type":"boolean","default":false},{"name":"order","type":"json"}],
	"spec":{"steps":[{"name":"a","command":"echo $amount"}]}}`

// pushWorkflow pushes a template (body is a PushWorkflowRequest).
func pushWorkflow(t *testing.T, f *fixture, body string) {
	t.Helper()
	status, _, out := f.do(t, http.MethodPost, workflowsPath, body)
	require.Contains(t, []int{http.StatusCreated, http.StatusOK}, status, out)
}

// createTrigger creates a trigger (body is a CreateTriggerRequest).
func createTrigger(t *testing.T, f *fixture, body string) {
	t.Helper()
	status, _, out := f.do(t, http.MethodPost, triggersPath, body)
	require.Equal(t, http.StatusCreated, status, out)
}

// A trigger that cannot deliver is refused with a 422 naming each field
// (400 for a body the schema refuses, 409 for a name taken), and nothing
// is stored.
func TestCreateTriggerRejects(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pushWorkflow(t, f, ordersWorkflow)
	createTrigger(t, f, `{"name":"taken","event_key":"k","workflow":{"name":"orders"},"params":{"amount":"1"}}`)
	cases := []struct {
		name, body string
		status     int
		fields     []string
	}{
		{"a filter that does not compile",
			`{"name":"t","event_key":"k","workflow":{"name":"orders"},"filter":"event.payload.amount >","params":{"amount":"1"}}`,
			422, []string{"filter"}},
		{"a filter that is not a boolean",
			`{"name":"t","event_key":"k","workflow":{"name":"orders"},"filter":"event.key + \"x\"","params":{"amount":"1"}}`,
			422, []string{"filter"}},
		{"a filter reading what an event does not have",
			`{"name":"t","event_key":"k","workflow":{"name":"orders"},"filter":"event.body.x > 1","params":{"amount":"1"}}`,
			422, []string{"filter"}},
		{"a param mapping that does not compile",
			`{"name":"t","event_key":"k","workflow":{"name":"orders"},"params":{"amount":"event.payload.("}}`,
			422, []string{"params.amount"}},
		{"a param the workflow does not declare, and a required one unmapped",
			`{"name":"t","event_key":"k","workflow":{"name":"orders"},"params":{"nope":"1"}}`,
			422, []string{"params.amount", "params.nope"}},
		{"a workflow that does not exist",
			`{"name":"t","event_key":"k","workflow":{"name":"ghost"}}`, 422, []string{"workflow"}},
		{"a workflow version that does not exist",
			`{"name":"t","event_key":"k","workflow":{"name":"orders","version":7},"params":{"amount":"1"}}`,
			422, []string{"workflow"}},
		{"every problem at once",
			`{"name":"t","event_key":"k","workflow":{"name":"ghost"},"filter":"1","params":{"a":")"}}`,
			422, []string{"filter", "params.a", "workflow"}},
		{"a name too long for its runs' names",
			`{"name":"` + strings.Repeat("a", 51) + `","event_key":"k","workflow":{"name":"orders"}}`, 400, []string{"name"}},
		{"no event key", `{"name":"t","workflow":{"name":"orders"}}`, 400, []string{"event_key"}},
		{"a version past a version's range",
			`{"name":"t","event_key":"k","workflow":{"name":"orders","version":2147483648}}`, 400, []string{"workflow.version"}},
		{"an unknown field", `{"name":"t","event_key":"k","workflow":{"name":"orders"},"when":"x"}`, 400, nil},
		{"a name taken", `{"name":"taken","event_key":"k","workflow":{"name":"orders"},"params":{"amount":"1"}}`, 409, nil},
	}
	for _, c := range cases {
		status, hdr, p := f.do(t, http.MethodPost, triggersPath, c.body)
		require.Equal(t, c.status, status, "%s: %v", c.name, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), c.name)
		for _, field := range c.fields {
			require.Contains(t, fields(p), field, "%s: %v", c.name, p)
		}
		if c.status == 422 {
			require.Equal(t, c.fields, fields(p), "%s: every field, sorted", c.name)
		}
	}
	ts, _, err := f.store.Triggers().ListTriggers(context.Background(), "demo", "dev", "", 0)
	require.NoError(t, err)
	require.Len(t, ts, 1, "only the first trigger is stored")
}

// A trigger is created, read, listed and deleted; a missing one is a 404.
func TestTriggerCRUD(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pushWorkflow(t, f, ordersWorkflow)
	status, _, tr := f.do(t, http.MethodPost, triggersPath, `{"name":"big","event_key":"order.created",
		"workflow":{"name":"orders","version":1},"filter":"event.payload.amount > 100","params":{"amount":"event.payload.amount"}}`)
	require.Equal(t, http.StatusCreated, status, tr)
	require.Equal(t, "big", tr["name"])
	require.Equal(t, "order.created", tr["event_key"])
	require.Equal(t, map[string]any{"name": "orders", "version": float64(1)}, tr["workflow"])
	require.Equal(t, "event.payload.amount > 100", tr["filter"])
	require.Equal(t, map[string]any{"amount": "event.payload.amount"}, tr["params"])
	createTrigger(t, f, `{"name":"all","event_key":"order.created","workflow":{"name":"orders"},"params":{"amount":"1"}}`)

	status, _, got := f.do(t, http.MethodGet, triggersPath+"/big", "")
	require.Equal(t, http.StatusOK, status, got)
	require.Equal(t, tr, got)
	status, _, list := f.do(t, http.MethodGet, triggersPath+"?limit=1", "")
	require.Equal(t, http.StatusOK, status, list)
	require.Len(t, list["triggers"], 1)
	require.Equal(t, "all", list["triggers"].([]any)[0].(map[string]any)["name"])
	require.Equal(t, "all", list["next_cursor"])
	status, _, list = f.do(t, http.MethodGet, triggersPath+"?cursor=all", "")
	require.Equal(t, http.StatusOK, status, list)
	require.Len(t, list["triggers"], 1)
	require.NotContains(t, list, "next_cursor")
	status, _, p := f.do(t, http.MethodGet, triggersPath+"?cursor=%00", "")
	require.Equal(t, http.StatusBadRequest, status, p)
	require.Equal(t, []string{"cursor"}, fields(p))

	status, _, _ = f.do(t, http.MethodDelete, triggersPath+"/big", "")
	require.Equal(t, http.StatusNoContent, status)
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		status, _, p = f.do(t, method, triggersPath+"/big", "")
		require.Equal(t, http.StatusNotFound, status, p)
		require.Equal(t, "not_found", p["code"])
	}
}
