package main

import (
	"net/http"
	"strings"
	"testing"
)

// lint names each problem's file line and field, suggests the known field
// nearest to a typo, applies the API's workflow, schedule and trigger rules
// once the schema passes, and passes a good file; run, schedule and trigger
// create -f refuse a bad file the same way without sending it.
func TestLint(t *testing.T) {
	t.Parallel()
	cases := []struct{ content, want string }{
		{"# typo\nsteps:\n- name: a\n  command: 'true'\n- name: b\n  comand: 'true'\n",
			`:6: steps[1].comand: unknown field (did you mean "command"?)`},
		{"steps:\n- name: a\n  command: x\n  retries: 3\n  xyzzy: 1\n", ":5: steps[0].xyzzy: unknown field\n"},
		{"steps:\n- name: a\n  command: x\n  replicas: many\n", ":4: steps[0].replicas: value must be an integer"},
		{"steps:\n- name: a\n  command: x\n  depends_on: [b]\n", ":4: steps[0].depends_on: is only allowed in DAG mode"},
		{"steps:\n- name: a\n  command: x\n---\nsteps:\n- name: A\n  command: x\n", ":6: steps[0].name: must be"},
		{"name: t1\nspec:\n  steps:\n  - name: a\n    comand: x\n", `:5: spec.steps[0].comand: unknown field (did you mean "command"?)`},
		{"name: nightly\nworkflow: {name: report}\ncron: '0 2 * * *'\ntimezon: UTC\n", `:4: timezon: unknown field (did you mean "timezone"?)`},
		{"name: nightly\nworkflow: {name: report}\ncron: '0 25 * * *'\n", ":3: cron: "},
		{"name: nightly\nworkflow: {name: report}\ninterval: 90s\noverlap: sometimes\n", ":4: overlap: "},
		{"name: Nightly\nworkflow: {name: report}\ninterval: 90s\n", ":1: name: string doesn't match the regular expression"},
		{"name: big\nevent_key: order.created\nworkflow: {name: ship}\nfilter: event.payload.amount >\n", ":4: filter: "},
		{"name: big\nevent_key: order.created\nworkflow: {name: ship}\nparams:\n  ORDER: event.payload.id +\n", ":5: params.ORDER: "},
	}
	for _, c := range cases {
		path := writeFile(t, c.content)
		_, err := capstan("http://127.0.0.1:1", "lint", "-f", path)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error()+"\n", path+c.want) {
			t.Errorf("%q: %v (exit %d), want %q", c.content, err, exitCode(err), path+c.want)
		}
	}
	for _, content := range []string{
		"mode: DAG\nsteps:\n- name: a\n  command: x\n- name: b\n  command: z\n  depends_on: [a]\n",
		"name: nightly\nworkflow: {name: report}\ncron: '0 2 * * *'\ntimezone: Europe/Berlin\noverlap: skip\n",
		"name: big\nevent_key: order.created\nworkflow: {name: ship}\nfilter: event.payload.amount > 100\nparams: {ORDER: event.payload.id}\n",
	} {
		good := writeFile(t, content)
		if out, err := capstan("http://127.0.0.1:1", "lint", "-f", good); err != nil || out != good+": ok\n" {
			t.Errorf("a good file %q: %q, %v", content, out, err)
		}
	}
	// --kind says what a document is when its keys do not: a schedule
	// missing both cron and interval is still a schedule.
	noCadence := writeFile(t, "name: nightly\nworkflow: {name: report}\n")
	if _, err := capstan("http://127.0.0.1:1", "lint", "--kind", "schedule", "-f", noCadence); exitCode(err) != exitUsage ||
		!strings.Contains(err.Error(), noCadence+":1: cron: set exactly one of cron and interval") {
		t.Errorf("lint --kind schedule of a schedule without cron: %v (exit %d)", err, exitCode(err))
	}
	if _, err := capstan("http://127.0.0.1:1", "lint", "--kind", "cronjob", "-f", noCadence); exitCode(err) != exitUsage ||
		!strings.Contains(err.Error(), `--kind: "cronjob" is not one of spec, template, schedule, trigger`) {
		t.Errorf("lint --kind cronjob: %v (exit %d)", err, exitCode(err))
	}

	s, srv := newStandIn(t, http.StatusCreated, "application/json", runJSON)
	bad := writeFile(t, "steps:\n- name: a\n  comand: x\n")
	_, err := capstan(srv, "run", "create", "-f", bad)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), bad+`:3: steps[0].comand: unknown field (did you mean "command"?)`) {
		t.Errorf("run create -f of a typo: %v (exit %d)", err, exitCode(err))
	}
	for _, c := range []struct{ cmd, content, want string }{
		{"schedule", "name: nightly\nworkflow: {name: report}\ncron: '0 2 * * *'\njiter: 10s\n", `:4: jiter: unknown field (did you mean "jitter"?)`},
		{"trigger", "name: big\nevent_key: order.created\nworkflow: {name: ship}\nfilter: 'event.payload.amount > '\n", ":4: filter: "},
	} {
		bad := writeFile(t, c.content)
		_, err := capstan(srv, c.cmd, "create", "-f", bad)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), bad+c.want) {
			t.Errorf("%s create -f of a bad file: %v (exit %d), want %q", c.cmd, err, exitCode(err), bad+c.want)
		}
	}
	if n := len(s.received()); n != 0 {
		t.Errorf("create -f of a bad file sent %d requests", n)
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"comand", "command", 1}, {"kitten", "sitting", 3}, {"abc", "", 3}} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
