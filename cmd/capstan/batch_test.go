package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// batchAnswer is a batch answer of a created run r1, a refused item and a
// created run r2.
var batchAnswer = `{"results":[{"run":` + runJSON + `,"created":true},` +
	`{"error":{"type":"/problems/invalid_spec","title":"Unprocessable Entity","status":422,"code":"invalid_spec",` +
	`"detail":"spec.steps[0].plugin: unknown plugin"}},` +
	`{"run":` + strings.Replace(runJSON, `"r1"`, `"r2"`, 1) + `,"created":true}]}`

// writeFile writes content to a file of t's and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "runs.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// step is a YAML document of one step named name.
func step(name string) string {
	return "steps:\n  - name: " + name + "\n    command: echo " + name + "\n"
}

// A file of several YAML documents is one batch request of their specs,
// each with the --param its spec declares; each created run's name goes to
// stdout, each refused document's problem to stderr, and a refusal makes
// the command fail with the API's exit code.
func TestCreateSeveralDocumentsSendsABatch(t *testing.T) {
	t.Parallel()
	s, api := newStandIn(t, http.StatusOK, "application/json", batchAnswer)
	withK := func(name string) string { return "params: [{name: K}]\n" + step(name) }
	file := writeFile(t, "# three runs\n---\n"+withK("a")+"---\n"+withK("b")+"--- # the last\n"+withK("c")+"---\n")
	root := newRoot()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"--api", api, "run", "create", "-f", file, "--param", "K=v"})
	err := root.Execute()
	if got := exitCode(err); got != exitAPI {
		t.Fatalf("exit %d (%v), want %d", got, err, exitAPI)
	}
	if want := "1 of 3 runs not created"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if want := "r1\nr2\n"; stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	if want := "document 2: 422 invalid_spec: spec.steps[0].plugin: unknown plugin\n"; stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	got := s.received()
	if len(got) != 1 || got[0].path != "/v1/projects/demo/domains/dev/runs/batch" {
		t.Fatalf("requests %+v, want one POST .../runs/batch", got)
	}
	runs, _ := got[0].body["runs"].([]any)
	if len(runs) != 3 {
		t.Fatalf("body %v: want 3 runs", got[0].body)
	}
	for i, name := range []string{"a", "b", "c"} {
		item := runs[i].(map[string]any)
		st := item["spec"].(map[string]any)["steps"].([]any)[0].(map[string]any)
		if st["name"] != name || st["env"] != nil {
			t.Errorf("run %d: step %v, want %s without env", i, st, name)
		}
		if !equalJSON(item["params"].(map[string]any), map[string]any{"K": "v"}) {
			t.Errorf("run %d: params %v, want K=v", i, item["params"])
		}
	}
}

// Over 1,000 documents go 1,000 to a request; a file of one document still
// uses CreateRun; --name, --wait and --watch refuse several documents
// before sending anything.
func TestCreateDocumentsSplitsAndChecks(t *testing.T) {
	t.Parallel()
	s, api := newStandIn(t, http.StatusOK, "application/json", `{"results":[]}`)
	var docs []string
	for i := range 1001 {
		docs = append(docs, step(fmt.Sprintf("s%d", i)))
	}
	if _, err := capstan(api, "run", "create", "-f", writeFile(t, strings.Join(docs, "---\n"))); err != nil {
		t.Fatal(err)
	}
	got := s.received()
	if len(got) != 2 || len(got[0].body["runs"].([]any)) != 1000 || len(got[1].body["runs"].([]any)) != 1 {
		t.Fatalf("%d requests, want 2 of 1000 and 1 runs", len(got))
	}
	two := writeFile(t, step("a")+"---\n"+step("b"))
	for _, flag := range [][]string{{"--name", "x"}, {"--wait"}, {"--watch"}} {
		_, err := capstan(api, append([]string{"run", "create", "-f", two}, flag...)...)
		if exitCode(err) != exitUsage {
			t.Errorf("%v with two documents: %v, want a usage error", flag, err)
		}
	}
	for _, bad := range []string{"# nothing\n---\n", step("a") + "---\nsteps: [\n", step("a") + "---\nbogus: 1\n"} {
		if _, err := capstan(api, "run", "create", "-f", writeFile(t, bad)); exitCode(err) != exitUsage {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}
	if got := s.received(); len(got) != 2 {
		t.Errorf("%d requests after the refused files, want still 2", len(got))
	}
	one, api1 := newStandIn(t, http.StatusCreated, "application/json", runJSON)
	if out, err := capstan(api1, "run", "create", "-f", writeFile(t, "---\n"+step("a")+"---\n")); err != nil || out != "r1\n" {
		t.Fatalf("one document: %q %v", out, err)
	}
	if got := one.received(); len(got) != 1 || got[0].path != "/v1/projects/demo/domains/dev/runs" {
		t.Errorf("one document: requests %+v, want one POST .../runs", got)
	}
}
