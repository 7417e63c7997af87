package main

import (
	"net/http"
	"strings"
	"testing"
)

// lint names each problem's file line and field, suggests the known field
// nearest to a typo, applies the API's workflow rules once the schema
// passes, and passes a good file; run create -f refuses a bad file the same
// way without sending it.
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
	}
	for _, c := range cases {
		path := writeFile(t, c.content)
		_, err := capstan("http://127.0.0.1:1", "lint", "-f", path)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error()+"\n", path+c.want) {
			t.Errorf("%q: %v (exit %d), want %q", c.content, err, exitCode(err), path+c.want)
		}
	}
	good := writeFile(t, "mode: DAG\nsteps:\n- name: a\n  command: x\n- name: b\n  command: z\n  depends_on: [a]\n")
	if out, err := capstan("http://127.0.0.1:1", "lint", "-f", good); err != nil || out != good+": ok\n" {
		t.Errorf("a good file: %q, %v", out, err)
	}

	s, srv := newStandIn(t, http.StatusCreated, "application/json", runJSON)
	bad := writeFile(t, "steps:\n- name: a\n  comand: x\n")
	_, err := capstan(srv, "run", "create", "-f", bad)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), bad+`:3: steps[0].comand: unknown field (did you mean "command"?)`) {
		t.Errorf("run create -f of a typo: %v (exit %d)", err, exitCode(err))
	}
	if n := len(s.received()); n != 0 {
		t.Errorf("run create -f of a bad file sent %d requests", n)
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
