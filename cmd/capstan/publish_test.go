package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	eventJSON = `{"id":"ev-1","key":"order.created","payload":{"amount":120},"runs":["big-orders-ev-1"],"created_at":"2026-01-01T00:00:00Z",
"deliveries":[{"trigger":"big-orders","run":"big-orders-ev-1"},{"trigger":"small","error":"no such key: amount"},{"trigger":"eu"}]}`
	triggerJSON = `{"name":"big-orders","event_key":"order.created","workflow":{"name":"ship","version":3},
"filter":"event.payload.amount > 100","params":{"ORDER":"event.payload.id"},"created_at":"2026-01-01T00:00:00Z"}`
	events   = "/v1/projects/demo/domains/dev/events"
	triggers = "/v1/projects/demo/domains/dev/triggers"
)

// event publish sends the key, the id and the payload (inline or from a
// file) and prints each trigger's delivery; event get reads one.
func TestEventPublish(t *testing.T) {
	t.Parallel()
	s, api := newRoutes(t, map[string]reply{
		"POST " + events:          {http.StatusAccepted, eventJSON},
		"GET " + events + "/ev-1": {http.StatusOK, eventJSON},
	})
	out, err := capstan(api, "event", "publish", "order.created", "--id", "ev-1", "--payload", `{"amount": 120}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"event ev-1  order.created", "started 1 run(s)", "big-orders  big-orders-ev-1",
		"small       -                no such key: amount", "eu          (filtered out)"} {
		if !strings.Contains(out, w) {
			t.Errorf("printed %q, want %q in it", out, w)
		}
	}
	path := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(path, []byte("{\n  \"amount\": 5,\n  \"items\": [1]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := capstan(api, "event", "publish", "order.created", "--payload", "@"+path); err != nil {
		t.Fatal(err)
	}
	if _, err := capstan(api, "event", "get", "ev-1"); err != nil {
		t.Fatal(err)
	}
	got := s.received()
	if len(got) != 3 || got[2].method != http.MethodGet {
		t.Fatalf("requests %+v, want two POSTs and a GET", got)
	}
	if want := map[string]any{"key": "order.created", "id": "ev-1", "payload": map[string]any{"amount": 120}}; !equalJSON(got[0].body, want) {
		t.Errorf("body %v, want %v", got[0].body, want)
	}
	if want := map[string]any{"key": "order.created", "payload": map[string]any{"amount": 5, "items": []any{1}}}; !equalJSON(got[1].body, want) {
		t.Errorf("body from the file %v, want %v", got[1].body, want)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("{\n  \"amount\": 5,\n  oops\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for payload, want := range map[string]string{
		"[1, 2]":         "--payload: want a JSON object",
		"null":           "--payload: want a JSON object",
		`{"a": 1} {}`:    "--payload: want one JSON object; more follows it",
		"@" + bad:        "--payload @" + bad + ": line 3: invalid character 'o'",
		"@/no/such/file": "no such file",
		`{"a": 1`:        "--payload: not JSON: unexpected EOF",
	} {
		_, err := capstan(api, "event", "publish", "k", "--payload", payload)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), want) {
			t.Errorf("--payload %s: %v, want a usage error with %q", payload, err, want)
		}
	}
	if got := s.received(); len(got) != 3 {
		t.Errorf("bad payloads sent %+v", got[3:])
	}
}

// trigger create sends the file's trigger; list, get and delete call their
// routes.
func TestTriggerCommands(t *testing.T) {
	t.Parallel()
	s, api := newRoutes(t, map[string]reply{
		"POST " + triggers:                   {http.StatusCreated, triggerJSON},
		"GET " + triggers:                    {http.StatusOK, `{"triggers":[` + triggerJSON + `]}`},
		"GET " + triggers + "/big-orders":    {http.StatusOK, triggerJSON},
		"DELETE " + triggers + "/big-orders": {http.StatusNoContent, ""},
	})
	file := writeFile(t, "name: big-orders\nevent_key: order.created\nworkflow: {name: ship, version: 3}\n"+
		"filter: event.payload.amount > 100\nparams: {ORDER: event.payload.id}\n")
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"trigger", "create", "-f", file}, []string{"trigger big-orders created: order.created starts ship@3\n"}},
		{[]string{"trigger", "list"}, []string{"EVENT KEY", "big-orders", "order.created", "ship@3", "event.payload.amount > 100"}},
		{[]string{"trigger", "get", "big-orders"}, []string{"name: big-orders\n", "ORDER: event.payload.id\n"}},
		{[]string{"trigger", "delete", "big-orders"}, []string{"trigger big-orders deleted\n"}},
	}
	for _, c := range cases {
		out, err := capstan(api, c.args...)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q printed %q, want %q in it", c.args, out, w)
			}
		}
	}
	got := s.received()
	want := map[string]any{"name": "big-orders", "event_key": "order.created", "workflow": map[string]any{"name": "ship", "version": 3},
		"filter": "event.payload.amount > 100", "params": map[string]any{"ORDER": "event.payload.id"}}
	if len(got) != 4 || !equalJSON(got[0].body, want) {
		t.Errorf("requests %+v, want the create's body %v first", got, want)
	}
	for content, want := range map[string]string{
		"name: t\nworkflow: {name: ship}\n":                               ":1: event_key: is required",
		"name: t\nevent_key: k\nworkflow: {name: ship}\nparams: {A: 1}\n": ":4: params.A: value must be a string",
	} {
		_, err := capstan(api, "trigger", "create", "-f", writeFile(t, content))
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a usage error with %q", content, err, want)
		}
	}
}
