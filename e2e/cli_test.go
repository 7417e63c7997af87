package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// cliResult is one run of the capstan binary.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the capstan binary against s (CAPSTAN_API from the
// environment) and returns its output and exit code.
func runCLI(t *testing.T, s *Stack, bin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-p", project, "-d", domain}, args...)...)
	cmd.Env = append(os.Environ(), "CAPSTAN_API="+s.APIURL, "CAPSTAN_API_URL=", "CAPSTAN_TOKEN="+s.Token,
		"XDG_CONFIG_HOME="+t.TempDir()) // no contexts of the user's
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// specFile writes a workflow file and returns its path.
func specFile(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "workflow.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o644))
	return path
}

// jq runs jq filter over input and returns its output, trimmed; filter
// "-s" reads the input's JSON values as one array and gives its first's
// type.
func jq(t *testing.T, filter, input string) string {
	t.Helper()
	args := []string{"-r", filter}
	if filter == "-s" {
		args = []string{"-r", "-s", ".[0].type"}
	}
	cmd := exec.Command("jq", args...)
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.Output()
	require.NoError(t, err, "jq %s over %q", filter, input)
	return strings.TrimSpace(string(out))
}

// TestCLI runs the real capstan binary against the real services: run
// create --wait's exit codes, -o json through jq, run watch, run list -w,
// abort, approve, logs -f, and a problem shown as one line.
func TestCLI(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed (apt-get install jq)")
	}
	s := Start(t, bins, Options{Executors: 1})
	bin := buildCLI(t)

	t.Run("wait exit codes", func(t *testing.T) {
		ok := runCLI(t, s, bin, "run", "create", "--wait", "--param", "WHO=world", "-f",
			specFile(t, "params:\n- name: WHO\nsteps:\n- name: hello\n  command: echo hello $WHO\n"))
		require.Equal(t, 0, ok.code, "a succeeding run exits 0: %s", ok.stderr)
		name := strings.Fields(ok.stdout)[0]
		require.Equal(t, "hello world\n", logs(t, s, name, "hello", 0, 1), "--param reaches the step's env as a param")
		require.Equal(t, map[string]any{"WHO": "world"}, map[string]any(*getRun(t, s, name).Params))
		undeclared := runCLI(t, s, bin, "run", "create", "--param", "WHO=world", "-f",
			specFile(t, "steps:\n- name: hello\n  command: echo hello\n"))
		require.Equal(t, 2, undeclared.code, "a param the spec does not declare is a usage error: %s", undeclared.stderr)
		require.Contains(t, undeclared.stderr, "declares no param WHO")

		bad := runCLI(t, s, bin, "run", "create", "--wait", "-f", specFile(t, "steps:\n- name: boom\n  command: exit 3\n"))
		require.Equal(t, 1, bad.code, "a failing run exits 1: %s %s", bad.stdout, bad.stderr)
		require.Contains(t, bad.stderr, "ended FAILED")

		usage := runCLI(t, s, bin, "run", "create", "--wait")
		require.Equal(t, 2, usage.code, "a missing -f is a usage error: %s", usage.stderr)

		got := runCLI(t, s, bin, "-o", "json", "run", "get", name)
		require.Equal(t, 0, got.code, got.stderr)
		require.Equal(t, "SUCCEEDED", jq(t, ".phase", got.stdout))
		list := runCLI(t, s, bin, "run", "list", "-o", "json", "--phase", "FAILED")
		require.Equal(t, "1", jq(t, ".runs | length", list.stdout))
		require.Contains(t, runCLI(t, s, bin, "-o", "yaml", "workers").stdout, "workers:")
	})

	t.Run("workflow templates", func(t *testing.T) { cliTemplates(t, s, bin) })

	t.Run("watch", func(t *testing.T) {
		res := runCLI(t, s, bin, "run", "create", "--watch", "-f",
			specFile(t, "steps:\n- name: one\n  command: 'true'\n- name: two\n  command: 'true'\n"))
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, "2/2 steps", "piped, a line per change with the progress")
		name := strings.Fields(res.stdout)[0]
		events := runCLI(t, s, bin, "-o", "json", "run", "watch", name)
		require.Equal(t, 0, events.code, events.stderr)
		require.Equal(t, "run.created", jq(t, "-s", events.stdout), "each event a JSON line")
	})

	t.Run("list -w", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "-p", project, "-d", domain, "-o", "json", "run", "list", "-w",
			"--phase", "SUCCEEDED", "--limit", "1")
		cmd.Env = append(os.Environ(), "CAPSTAN_API="+s.APIURL, "CAPSTAN_TOKEN="+s.Token)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		defer func() { cancel(); _ = cmd.Wait() }()
		lines := bufio.NewScanner(out)
		require.True(t, lines.Scan(), "the page first (indented JSON), then a compact line per change")
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "quick", Command: ptr("true")}}})
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), "{") && strings.Contains(lines.Text(), `"name":"`+name+`"`) {
				require.Equal(t, "SUCCEEDED", jq(t, ".phase", lines.Text()), "a line per run reaching the phase")
				return
			}
		}
		t.Fatalf("no line for %s: %v", name, lines.Err())
	})

	t.Run("abort", func(t *testing.T) {
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "nap", Command: ptr("sleep 60")}}})
		waitPhase(t, s, name, 30*time.Second, api.PhaseRUNNING)
		res := runCLI(t, s, bin, "run", "abort", name, "--reason", "cli test")
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, "abort of "+name+" accepted")
		wait := runCLI(t, s, bin, "run", "wait", name, "--expect", "ABORTED", "--timeout", "30s")
		require.Equal(t, 0, wait.code, wait.stderr)
		waited := runCLI(t, s, bin, "run", "wait", name)
		require.Equal(t, 1, waited.code, "an ABORTED run is not the SUCCEEDED --wait expects")
	})

	t.Run("approve", func(t *testing.T) {
		name := create(t, s, approvalSpec)
		s.Eventually(30*time.Second, "the gate waits", func() bool {
			return action(getRun(t, s, name), "gate").Phase == api.PhasePAUSED
		})
		res := runCLI(t, s, bin, "approve", name, "gate", "--comment", "looks good")
		require.Equal(t, 0, res.code, res.stderr)
		run := waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
		require.Equal(t, "looks good", *action(run, "gate").Approval.Comment)

		again := runCLI(t, s, bin, "approve", name, "gate")
		require.Equal(t, 3, again.code, "the API refuses: exit 3")
		require.Equal(t, 1, strings.Count(again.stderr, "\n"), "one line: %q", again.stderr)
		require.Contains(t, again.stderr, "409 ")
	})

	t.Run("logs -f", func(t *testing.T) {
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "talk",
			Command: ptr("for i in 1 2 3; do echo line $i; sleep 0.3; done")}}})
		s.Eventually(30*time.Second, "attempt 1 exists", func() bool {
			a := action(getRun(t, s, name), "talk")
			return len(a.Tasks) == 1 && len(a.Tasks[0].Attempts) == 1
		})
		res := runCLI(t, s, bin, "logs", "-f", name, "talk")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, "line 1\nline 2\nline 3\n", res.stdout)
	})

	t.Run("problem", func(t *testing.T) {
		res := runCLI(t, s, bin, "run", "get", "no-such-run")
		require.Equal(t, 3, res.code)
		require.Equal(t, 1, strings.Count(res.stderr, "\n"), "one line: %q", res.stderr)
		require.True(t, strings.HasPrefix(res.stderr, "capstan: 404 not_found: "), res.stderr)
		down := runCLI(t, &Stack{APIURL: "http://127.0.0.1:1"}, bin, "workers")
		require.Equal(t, 3, down.code, "an unreachable API: exit 3")
	})
}

// greeterFile is a template with a param of each type.
const greeterFile = `name: greeter
description: %s
params:
- {name: WHO, type: string, required: true}
- {name: TIMES, type: number, default: 1}
- {name: LOUD, type: boolean, default: false}
- {name: EXTRA, type: json}
spec:
  steps:
  - name: greet
    command: 'for i in $(seq $TIMES); do echo "hello $WHO $LOUD $EXTRA"; done'
`

// cliTemplates pushes a template twice and changed, lists and reads it,
// runs it with a --param of each type (and a wrong one), and deletes it.
func cliTemplates(t *testing.T, s *Stack, bin string) {
	push := func(description, want string) {
		t.Helper()
		res := runCLI(t, s, bin, "workflow", "push", "-f", specFile(t, fmt.Sprintf(greeterFile, description)))
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, want, res.stdout)
	}
	push("greets", "workflow greeter: created version 1\n")
	push("greets", "workflow greeter: unchanged, version 1\n")
	push("greets loudly", "workflow greeter: created version 2\n")

	list := runCLI(t, s, bin, "workflow", "list")
	require.Equal(t, 0, list.code, list.stderr)
	require.Regexp(t, `greeter\s+2\s+WHO:string\*, TIMES:number=1, LOUD:boolean=false, EXTRA:json\s`, list.stdout)
	got := runCLI(t, s, bin, "-o", "json", "workflow", "get", "greeter@1")
	require.Equal(t, "greets", jq(t, ".description", got.stdout), got.stderr)
	require.Contains(t, runCLI(t, s, bin, "workflow", "get", "greeter").stdout, "description: greets loudly\n")
	require.Equal(t, "2 1", jq(t, `[.workflows[].version] | map(tostring) | join(" ")`,
		runCLI(t, s, bin, "-o", "json", "workflow", "versions", "greeter").stdout))

	res := runCLI(t, s, bin, "run", "create", "--workflow", "greeter@1", "--wait", "--param", "WHO=ann",
		"--param", "TIMES=2", "--param", "LOUD=true", "--param", `EXTRA={"a": [1]}`)
	require.Equal(t, 0, res.code, res.stderr)
	name := strings.Fields(res.stdout)[0]
	run := getRun(t, s, name)
	require.Equal(t, &api.WorkflowVersionRef{Name: "greeter", Version: 1}, run.Workflow)
	require.Equal(t, map[string]any{"WHO": "ann", "TIMES": 2.0, "LOUD": true, "EXTRA": map[string]any{"a": []any{1.0}}},
		map[string]any(*run.Params), "each --param in its declared type")
	require.Equal(t, "hello ann true {\"a\":[1]}\nhello ann true {\"a\":[1]}\n", logs(t, s, name, "greet", 0, 1))
	require.Contains(t, runCLI(t, s, bin, "run", "get", name).stdout, "from workflow greeter version 1\n")

	wrong := runCLI(t, s, bin, "run", "create", "--workflow", "greeter", "--param", "WHO=ann", "--param", "TIMES=twice")
	require.Equal(t, 2, wrong.code, "a value not of its type is a usage error: %s", wrong.stderr)
	require.Equal(t, "capstan: --param TIMES=twice: TIMES is a number param of workflow greeter version 2: "+
		"\"twice\" is not a finite number\n", wrong.stderr)
	missing := runCLI(t, s, bin, "run", "create", "--workflow", "greeter")
	require.Equal(t, 3, missing.code, "the API refuses a run without its required param: %s", missing.stderr)
	require.Contains(t, missing.stderr, "params.WHO")

	del := runCLI(t, s, bin, "workflow", "delete", "greeter")
	require.Equal(t, 0, del.code, del.stderr)
	require.Equal(t, "workflow greeter deleted\n", del.stdout)
	gone := runCLI(t, s, bin, "run", "create", "--workflow", "greeter", "--param", "WHO=ann")
	require.Equal(t, 3, gone.code, "no new run of a deleted template: %s", gone.stderr)
	require.Contains(t, gone.stderr, "404 ")
}
