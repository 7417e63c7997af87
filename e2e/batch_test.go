package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLICreatesABatch runs `capstan run create -f` on a file of several
// YAML documents against the real services: the valid documents become
// runs in one batch request, the scheduler starts them from its one
// runs:start message and they succeed; the document the API refuses (a
// sub-workflow of a template it does not hold, which no offline check can
// know) is named on stderr and the command exits 3. A document lint
// refuses stops the file before any request (exit 2).
func TestCLICreatesABatch(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1})
	bin := buildCLI(t)
	file := specFile(t, "params: [{name: WHO}]\nsteps:\n- name: one\n  command: 'true'\n"+
		"---\nparams: [{name: WHO}]\nsteps:\n- name: two\n  kind: workflow\n  workflow: {name: no-such-template}\n"+
		"---\nmode: DAG\nparams: [{name: WHO}]\nsteps:\n- name: three\n  command: echo $WHO\n")
	res := runCLI(t, s, bin, "run", "create", "--param", "WHO=batch", "-f", file)
	require.Equal(t, 3, res.code, "a refused document exits 3: %s %s", res.stdout, res.stderr)
	require.Contains(t, res.stderr, "document 2: 422 invalid_spec: spec.steps[0].workflow")
	require.Contains(t, res.stderr, "1 of 3 runs not created")
	names := strings.Fields(res.stdout)
	require.Len(t, names, 2, res.stdout)
	for _, name := range names {
		w := runCLI(t, s, bin, "run", "wait", "--timeout", "1m", name)
		require.Equal(t, 0, w.code, "run %s: %s %s", name, w.stdout, w.stderr)
	}
	require.Equal(t, "batch\n", logs(t, s, names[1], "three", 0, 1), "--param is each document's param")

	local := runCLI(t, s, bin, "run", "create", "-f", specFile(t, "steps:\n- name: a\n  command: 'true'\n"+
		"---\nsteps:\n- name: b\n  plugin: docker\n  command: 'true'\n"))
	require.Equal(t, 2, local.code, "lint refuses the file: %s %s", local.stdout, local.stderr)
	require.Contains(t, local.stderr, `workflow.yaml:7: steps[0].plugin: value is not one of the allowed values ["shell","http","container","kubernetes","noop"]`)
	require.Empty(t, local.stdout, "no run created")

	ok := runCLI(t, s, bin, "-o", "json", "run", "create", "-f",
		specFile(t, "steps:\n- name: a\n  command: 'true'\n---\nsteps:\n- name: b\n  command: 'true'\n"))
	require.Equal(t, 0, ok.code, ok.stderr)
	require.Len(t, strings.Split(strings.TrimSpace(ok.stdout), "\n"), 2, "a JSON line per run: %s", ok.stdout)
}
