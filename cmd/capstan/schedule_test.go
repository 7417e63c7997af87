package main

import (
	"net/http"
	"strings"
	"testing"
)

// scheduleJSON is the schedule nightly of hello's latest version.
const scheduleJSON = `{"name":"nightly","workflow":{"name":"hello"},"params":{"WHO":"ann"},"cron":"0 2 * * *",
"timezone":"Europe/Berlin","overlap":"skip","catchup_window":"1h","paused":false,
"next_run_times":["2026-01-02T01:00:00Z","2026-01-03T01:00:00Z"],
"recent_runs":[{"name":"nightly-20260101t010000z","scheduled_at":"2026-01-01T01:00:00Z","phase":"SUCCEEDED"}],
"missed_catchup_window":4,"skipped_overlap":2,"buffered":0,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`

const schedules = "/v1/projects/demo/domains/dev/schedules"

// Each schedule command calls its route with its body and prints a line
// or a table of the answer.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	paused := strings.Replace(strings.Replace(scheduleJSON, `"paused":false`, `"paused":true`, 1),
		`"next_run_times":["2026-01-02T01:00:00Z","2026-01-03T01:00:00Z"]`, `"next_run_times":[]`, 1)
	times := `{"scheduled_times":["2026-01-01T01:00:00Z","2026-01-02T01:00:00Z","2026-01-03T01:00:00Z"]}`
	s, api := newRoutes(t, map[string]reply{
		"POST " + schedules:                       {http.StatusCreated, scheduleJSON},
		"GET " + schedules:                        {http.StatusOK, `{"schedules":[` + scheduleJSON + `]}`},
		"GET " + schedules + "/nightly":           {http.StatusOK, scheduleJSON},
		"POST " + schedules + "/nightly/pause":    {http.StatusOK, paused},
		"POST " + schedules + "/nightly/unpause":  {http.StatusOK, scheduleJSON},
		"POST " + schedules + "/nightly/trigger":  {http.StatusAccepted, `{"scheduled_times":["2026-01-01T12:00:00Z"]}`},
		"POST " + schedules + "/nightly/backfill": {http.StatusAccepted, times},
		"DELETE " + schedules + "/nightly":        {http.StatusNoContent, ""},
	})
	file := writeFile(t, "name: nightly\nworkflow: {name: hello}\nparams: {WHO: ann}\ncron: '0 2 * * *'\ntimezone: Europe/Berlin\n")
	cases := []struct {
		args       []string
		path       string
		body       map[string]any
		want       []string
		wantNoBody bool
	}{
		{args: []string{"schedule", "create", "-f", file}, path: "POST " + schedules,
			body: map[string]any{"name": "nightly", "workflow": map[string]any{"name": "hello"}, "params": map[string]any{"WHO": "ann"},
				"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
			want: []string{"schedule nightly created; next run at "}},
		{args: []string{"schedule", "list"}, path: "GET " + schedules,
			want: []string{"NAME", "NEXT RUN", "nightly", "hello@latest", `cron "0 2 * * *" Europe/Berlin`, "skip", "false"}},
		{args: []string{"schedule", "get", "nightly"}, path: "GET " + schedules + "/nightly",
			want: []string{"schedule nightly  hello@latest", `params {"WHO":"ann"}`, "missed_catchup_window 4  skipped_overlap 2",
				"next run times: ", "nightly-20260101t010000z", "SUCCEEDED"}},
		{args: []string{"schedule", "pause", "nightly"}, path: "POST " + schedules + "/nightly/pause",
			want: []string{"schedule nightly paused (paused)\n"}},
		{args: []string{"schedule", "unpause", "nightly"}, path: "POST " + schedules + "/nightly/unpause",
			want: []string{"schedule nightly unpaused; next run at "}},
		{args: []string{"schedule", "trigger", "nightly", "--overlap", "allow_all"}, path: "POST " + schedules + "/nightly/trigger",
			body: map[string]any{"overlap": "allow_all"}, want: []string{"schedule nightly triggered for 2026-01-01T12:00:00Z\n"}},
		{args: []string{"schedule", "backfill", "nightly", "--start", "2026-01-01", "--end", "2026-01-03T02:00:00+01:00"},
			path: "POST " + schedules + "/nightly/backfill",
			body: map[string]any{"start": "2026-01-01T00:00:00Z", "end": "2026-01-03T02:00:00+01:00"},
			want: []string{"schedule nightly backfilled: 3 times, 2026-01-01T01:00:00Z to 2026-01-03T01:00:00Z\n"}},
		{args: []string{"schedule", "delete", "nightly"}, path: "DELETE " + schedules + "/nightly", want: []string{"schedule nightly deleted\n"}},
	}
	for i, c := range cases {
		out, err := capstan(api, c.args...)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q printed %q, want %q in it", c.args, out, w)
			}
		}
		got := s.received()
		if len(got) != i+1 || got[i].method+" "+got[i].path != c.path {
			t.Fatalf("%q: requests %+v, want %s last", c.args, got, c.path)
		}
		if c.body != nil && !equalJSON(got[i].body, c.body) {
			t.Errorf("%q: body %v, want %v", c.args, got[i].body, c.body)
		}
	}
	for _, args := range [][]string{
		{"schedule", "backfill", "nightly", "--start", "yesterday", "--end", "2026-01-01"},
		{"schedule", "backfill", "nightly", "--start", "2026-01-01"},
		{"schedule", "trigger", "nightly", "--overlap", "sometimes"},
		{"schedule", "create", "-f", writeFile(t, "workflow: {name: hello}\ncron: '* * * * *'\n")},
		{"schedule", "create", "-f", writeFile(t, "name: x\ncron: '* * * * *'\n")},
		{"schedule", "create", "-f", writeFile(t, "name: x\nworkflow: {name: hello}\npaused: maybe\n")},
		{"schedule", "pause"},
	} {
		if _, err := capstan(api, args...); exitCode(err) != exitUsage {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if got := s.received(); len(got) != len(cases) {
		t.Errorf("usage errors sent %+v", got[len(cases):])
	}
}

// A schedule file's problems name their line and field, as capstan lint
// does.
func TestScheduleFileErrorsNameTheField(t *testing.T) {
	t.Parallel()
	_, api := newRoutes(t, nil)
	for content, want := range map[string]string{
		"name: x\ncron: '* * * * *'\n":                                      ":1: workflow: is required",
		"name: x\nworkflow: {name: hello}\ncron: '@daily'\npaused: maybe\n": ":4: paused: value must be a boolean",
		"name: x\nworkflow: {name: hello}\nevery: 5m\n":                     `:3: every: unknown field`,
		"name: x\nworkflow: {name: hello}\n":                                ":1: cron: set exactly one of cron and interval; got neither",
		"---\nname: x\nworkflow: {name: a}\n---\nname: [\n":                 ": not valid YAML or JSON: line 5: ",
		"name: x\nworkflow: {name: hello, version: latest}\n":               ":2: workflow.version: value must be an integer",
	} {
		_, err := capstan(api, "schedule", "create", "-f", writeFile(t, content))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q in it", content, err, want)
		}
	}
}
