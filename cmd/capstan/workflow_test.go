package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
)

// templateJSON is version 2 of the template hello, with a param of each
// type.
const templateJSON = `{"name":"hello","version":2,"description":"greets","created_at":"2026-01-01T00:00:00Z",
"params":[{"name":"WHO","type":"string","required":true},{"name":"N","type":"number","default":1},
{"name":"LOUD","type":"boolean"},{"name":"CFG","type":"json"},{"name":"NOTE"}],
"spec":{"steps":[{"name":"greet","command":"echo hello $WHO"}]}}`

const (
	workflows = "/v1/projects/demo/domains/dev/workflows"
	runs      = "/v1/projects/demo/domains/dev/runs"
)

// Each text becomes the JSON value of its param's declared type; a value
// that is not of it, or a name not declared, is a usage error naming it.
func TestTypedParams(t *testing.T) {
	t.Parallel()
	var tmpl api.WorkflowTemplate
	if err := json.Unmarshal([]byte(templateJSON), &tmpl); err != nil {
		t.Fatal(err)
	}
	got, err := typedParams(tmpl.Params, map[string]string{"WHO": "ann", "N": "2.5", "LOUD": "false",
		"CFG": `{"a":[1,"x"]}`, "NOTE": " 7 "}, "workflow hello version 2")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"WHO": "ann", "N": 2.5, "LOUD": false, "CFG": map[string]any{"a": []any{1.0, "x"}}, "NOTE": " 7 "}
	if !equalJSON(*got, want) {
		t.Errorf("params %v, want %v", *got, want)
	}
	if p, err := typedParams(tmpl.Params, nil, "x"); p != nil || err != nil {
		t.Errorf("no --param: %v %v, want nil", p, err)
	}
	for text, want := range map[string]string{
		"N=abc":     `--param N=abc: N is a number param of workflow hello version 2: "abc" is not a finite number`,
		"N=NaN":     `--param N=NaN: N is a number param of workflow hello version 2: "NaN" is not a finite number`,
		"LOUD=yes":  `--param LOUD=yes: LOUD is a boolean param of workflow hello version 2: "yes" is neither true nor false`,
		"CFG={a:1}": `--param CFG={a:1}: CFG is a json param of workflow hello version 2: not JSON: invalid character 'a' looking for beginning of object key string`,
		"NOPE=1":    `--param NOPE: workflow hello version 2 declares no param NOPE (it declares WHO, N, LOUD, CFG, NOTE)`,
	} {
		k, v, _ := strings.Cut(text, "=")
		_, err := typedParams(tmpl.Params, map[string]string{k: v}, "workflow hello version 2")
		if exitCode(err) != exitUsage || err.Error() != want {
			t.Errorf("%s: %v, want the usage error %q", text, err, want)
		}
	}
	for _, flags := range [][]string{{"N"}, {"=1"}, {"N=1", "N=2"}} {
		if _, err := paramArgs(flags); exitCode(err) != exitUsage {
			t.Errorf("%q: %v, want a usage error", flags, err)
		}
	}
}

// run create --workflow reads the version it names (or the latest, which
// the run is then pinned to), converts each --param by its declared type
// and sends {workflow, params}; a wrong value sends nothing; without
// --param it reads no template.
func TestCreateRunOfTemplate(t *testing.T) {
	t.Parallel()
	s, api := newRoutes(t, map[string]reply{
		"GET " + workflows + "/hello/versions/2": {http.StatusOK, templateJSON},
		"GET " + workflows + "/hello":            {http.StatusOK, templateJSON},
		"POST " + runs:                           {http.StatusCreated, runJSON},
	})
	out, err := capstan(api, "run", "create", "--workflow", "hello@2", "--param", "WHO=ann", "--param", "N=3",
		"--param", "LOUD=true", "--param", `CFG=[1,{"b":null}]`, "--name", "r1")
	if err != nil || out != "r1\n" {
		t.Fatalf("create: %q %v", out, err)
	}
	got := s.received()
	if len(got) != 2 || got[0].path != workflows+"/hello/versions/2" || got[1].method != http.MethodPost || got[1].path != runs {
		t.Fatalf("requests %+v, want GET of version 2 then POST .../runs", got)
	}
	want := map[string]any{"name": "r1", "workflow": map[string]any{"name": "hello", "version": 2},
		"params": map[string]any{"WHO": "ann", "N": 3, "LOUD": true, "CFG": []any{1, map[string]any{"b": nil}}}}
	if !equalJSON(got[1].body, want) {
		t.Errorf("body %v, want %v", got[1].body, want)
	}

	_, err = capstan(api, "run", "create", "--workflow", "hello", "--param", "N=three")
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "N is a number param of workflow hello version 2") {
		t.Errorf("N=three: %v, want a usage error naming N", err)
	}
	if got := s.received(); len(got) != 3 || got[2].path != workflows+"/hello" {
		t.Fatalf("requests %+v, want the latest version read and no run created", got)
	}
	if _, err := capstan(api, "run", "create", "--workflow", "hello", "--param", "WHO=bo"); err != nil {
		t.Fatal(err)
	}
	pinned := map[string]any{"workflow": map[string]any{"name": "hello", "version": 2}, "params": map[string]any{"WHO": "bo"}}
	if got := s.received(); len(got) != 5 || !equalJSON(got[4].body, pinned) {
		t.Errorf("requests %+v, want the latest read, then a POST of the version read: %v", got[3:], pinned)
	}
	if _, err := capstan(api, "run", "create", "--workflow", "hello"); err != nil {
		t.Fatal(err)
	}
	if got := s.received(); len(got) != 6 || !equalJSON(got[5].body, map[string]any{"workflow": map[string]any{"name": "hello"}}) {
		t.Errorf("requests %+v, want one POST of {workflow: {name: hello}}", got[5:])
	}
	for _, args := range [][]string{
		{"--workflow", "hello@x"}, {"--workflow", "hello@0"}, {"--workflow", "@2"},
		{"--workflow", "hello", "-f", "x.yaml"}, {},
	} {
		if _, err := capstan(api, append([]string{"run", "create"}, args...)...); exitCode(err) != exitUsage {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	_, missing := newRoutes(t, nil)
	if _, err := capstan(missing, "run", "create", "--workflow", "ghost", "--param", "A=1"); exitCode(err) != exitAPI ||
		err.Error() != "404 not_found: no such route" {
		t.Errorf("an unknown template: %v, want the API's 404", err)
	}
}

// run create -f sends --param as the spec's params, typed by its
// declarations, and leaves the steps' env alone.
func TestCreateRunOfSpecSendsParams(t *testing.T) {
	t.Parallel()
	s, api := newRoutes(t, map[string]reply{"POST " + runs: {http.StatusCreated, runJSON}})
	file := writeFile(t, "params:\n- {name: COUNT, type: number}\nsteps:\n- name: a\n  command: echo $COUNT\n")
	if _, err := capstan(api, "run", "create", "-f", file, "--param", "COUNT=4"); err != nil {
		t.Fatal(err)
	}
	got := s.received()
	if len(got) != 1 || !equalJSON(got[0].body["params"].(map[string]any), map[string]any{"COUNT": 4}) {
		t.Fatalf("requests %+v, want one with params COUNT=4", got)
	}
	if st := got[0].body["spec"].(map[string]any)["steps"].([]any)[0].(map[string]any); st["env"] != nil {
		t.Errorf("step %v: --param rewrote its env", st)
	}
	_, err := capstan(api, "run", "create", "-f", file, "--param", "M=1")
	if want := "--param M: " + file + " declares no param M (it declares COUNT)"; exitCode(err) != exitUsage || err.Error() != want {
		t.Errorf("an undeclared param: %v, want %q", err, want)
	}
}

// workflow push sends the file's template and says whether it made a
// version; a bad file names its field or line and sends nothing.
func TestWorkflowPush(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "name: hello\ndescription: greets\nparams:\n- {name: WHO, required: true}\n"+
		"spec:\n  steps:\n  - {name: greet, command: 'echo hello $WHO'}\n")
	for status, want := range map[int]string{http.StatusCreated: "workflow hello: created version 2\n",
		http.StatusOK: "workflow hello: unchanged, version 2\n"} {
		s, api := newRoutes(t, map[string]reply{"POST " + workflows: {status, templateJSON}})
		out, err := capstan(api, "workflow", "push", "-f", file)
		if err != nil || out != want {
			t.Errorf("%d: printed %q (%v), want %q", status, out, err, want)
		}
		got := s.received()
		wantBody := map[string]any{"name": "hello", "description": "greets", "params": []any{map[string]any{"name": "WHO", "required": true}},
			"spec": map[string]any{"steps": []any{map[string]any{"name": "greet", "command": "echo hello $WHO"}}}}
		if len(got) != 1 || !equalJSON(got[0].body, wantBody) {
			t.Errorf("%d: requests %+v, want one POST of %v", status, got, wantBody)
		}
	}
	s, api := newRoutes(t, map[string]reply{"POST " + workflows: {http.StatusCreated, templateJSON}})
	for content, want := range map[string]string{
		"name: hello\nspec: {steps: []}\nbogus: 1\n":             `:3: bogus: unknown field`,
		"spec: {steps: []}\n":                                    "name: is required",
		"name: hello\n":                                          "spec: is required",
		"name: hello\nspec:\n  steps: [\n":                       "line 3",
		"name: hello\nspec: {steps: [{name: a, replicas: x}]}\n": ":2: spec.steps[0].replicas: value must be an integer",
	} {
		path := writeFile(t, content)
		_, err := capstan(api, "workflow", "push", "-f", path)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), path+":") {
			t.Errorf("%q: %v, want a usage error naming the file and %q", content, err, want)
		}
	}
	if got := s.received(); len(got) != 0 {
		t.Errorf("bad files sent %+v", got)
	}
}

// workflow list, get, versions and delete read their routes and print
// what they answer.
func TestWorkflowReads(t *testing.T) {
	t.Parallel()
	list := `{"workflows":[` + templateJSON + `]}`
	_, api := newRoutes(t, map[string]reply{
		"GET " + workflows:                       {http.StatusOK, list},
		"GET " + workflows + "/hello/versions":   {http.StatusOK, list},
		"GET " + workflows + "/hello/versions/2": {http.StatusOK, templateJSON},
		"DELETE " + workflows + "/hello":         {http.StatusNoContent, ""},
	})
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"workflow", "list"}, []string{"NAME", "LATEST", "PARAMS", "hello", "2",
			"WHO:string*, N:number=1, LOUD:boolean, CFG:json, NOTE:string"}},
		{[]string{"workflow", "versions", "hello"}, []string{"VERSION", "greets"}},
		{[]string{"workflow", "get", "hello@2"}, []string{"name: hello\n", "version: 2\n", "command: echo hello $WHO\n"}},
		{[]string{"workflow", "get", "hello@2", "-o", "json"}, []string{`"name": "hello"`, `"version": 2`}},
		{[]string{"workflow", "delete", "hello"}, []string{"workflow hello deleted\n"}},
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
	if _, err := capstan(api, "workflow", "get", "ghost"); exitCode(err) != exitAPI {
		t.Errorf("get of an unknown template: %v, want the API's refusal", err)
	}
}
