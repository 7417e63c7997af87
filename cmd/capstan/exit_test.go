package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Each failure maps to its documented exit code: usage 2, the API's
// refusal or an unreachable API 3, a run that ended otherwise 1.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	_, problemAPI := newStandIn(t, http.StatusNotFound, "application/problem+json",
		`{"type":"/problems/not_found","title":"Not Found","status":404,"code":"not_found","detail":"run demo/dev/x not found"}`)
	cases := []struct {
		api  string
		args []string
		want int
	}{
		{problemAPI, []string{"run", "get"}, exitUsage},
		{problemAPI, []string{"run", "get", "x", "--bogus"}, exitUsage},
		{problemAPI, []string{"-o", "xml", "workers"}, exitUsage},
		{problemAPI, []string{"nonsense"}, exitUsage},
		{problemAPI, []string{"run", "create", "-f", "/no/such/file.yaml"}, exitUsage},
		{problemAPI, []string{"run", "create"}, exitUsage},
		{problemAPI, []string{"run", "get", "x"}, exitAPI},
		{"http://127.0.0.1:1", []string{"workers"}, exitAPI},
	}
	for _, c := range cases {
		_, err := capstan(c.api, c.args...)
		if got := exitCode(err); got != c.want {
			t.Errorf("%q: exit %d (%v), want %d", c.args, got, err, c.want)
		}
	}
	if got := exitCode(&runFailed{run: "r", phase: "FAILED"}); got != exitFailed {
		t.Errorf("a failed run: exit %d, want %d", got, exitFailed)
	}
	if got := exitCode(nil); got != exitOK {
		t.Errorf("success: exit %d", got)
	}
}

// A problem with several field errors and a multi-line detail is still one
// line.
func TestAPIErrorIsOneLine(t *testing.T) {
	t.Parallel()
	err := apiError(422, []byte(`{"type":"/problems/invalid_request","title":"Unprocessable Entity","status":422,`+
		`"code":"invalid_request","detail":"spec:\ntwo problems","errors":[{"field":"a","message":"bad"},{"field":"b","message":"worse"}]}`))
	want := "422 invalid_request: spec: two problems (a: bad; b: worse)"
	if err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	if err := apiError(502, []byte("<html>\nbad gateway\n</html>")); strings.Contains(err.Error(), "\n") {
		t.Errorf("a non-problem body on several lines: %q", err)
	}
}

// -o json and -o yaml print the API's object; table prints the table.
func TestOutputFormats(t *testing.T) {
	t.Parallel()
	_, api := newStandIn(t, http.StatusOK, "application/json", runJSON)
	for _, o := range []string{"json", "yaml", "table"} {
		out, err := capstan(api, "-o", o, "run", "get", "r1")
		if err != nil {
			t.Fatalf("-o %s: %v", o, err)
		}
		var v map[string]any
		switch o {
		case "table":
			if !strings.HasPrefix(out, "run demo/dev/r1  RUNNING") {
				t.Errorf("-o table: %q", out)
			}
			continue
		case "json", "yaml":
			if err := yaml.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("-o %s: %v: %q", o, err, out)
			}
		}
		if fmt.Sprintln(v["name"], v["phase"]) != "r1 RUNNING\n" {
			t.Errorf("-o %s: %v", o, v)
		}
	}
}

// An answer the CLI cannot decode fails with the operation and the run it
// was about ahead of the decoder's words, which name neither.
func TestUndecodableAnswerNamesTheOperation(t *testing.T) {
	t.Parallel()
	_, api := newStandIn(t, http.StatusOK, "application/json", `{"name":5}`)
	_, err := capstan(api, "run", "get", "r1")
	if err == nil || !strings.HasPrefix(err.Error(), "get run r1: ") || !strings.Contains(err.Error(), "cannot unmarshal") {
		t.Errorf("got %v, want the decoding error after \"get run r1: \"", err)
	}
}
