package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLICreatesABatch runs `capstan run create -f` on a file of several
// YAML documents against the real services: the valid documents become
// runs in one batch request, the scheduler starts them from its one
// runs:start message and they succeed; the refused document is named on
// stderr and the command exits 3.
func TestCLICreatesABatch(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1})
	bin := buildCLI(t)
	file := specFile(t, "params: [{name: WHO}]\nsteps:\n- name: one\n  command: 'true'\n"+
		"---\nparams: [{name: WHO}]\nsteps:\n- name: two\n  plugin: docker\n  command: 'true'\n"+
		"---\nmode: DAG\nparams: [{name: WHO}]\nsteps:\n- name: three\n  command: echo $WHO\n")
	res := runCLI(t, s, bin, "run", "create", "--param", "WHO=batch", "-f", file)
	require.Equal(t, 3, res.code, "a refused document exits 3: %s %s", res.stdout, res.stderr)
	require.Contains(t, res.stderr, "document 2: 400 invalid_request: spec.steps[0].plugin")
	require.Contains(t, res.stderr, "1 of 3 runs not created")
	names := strings.Fields(res.stdout)
	require.Len(t, names, 2, res.stdout)
	for _, name := range names {
		w := runCLI(t, s, bin, "run", "wait", "--timeout", "1m", name)
		require.Equal(t, 0, w.code, "run %s: %s %s", name, w.stdout, w.stderr)
	}
	require.Equal(t, "batch\n", logs(t, s, names[1], "three", 0, 1), "--param is each document's param")

	ok := runCLI(t, s, bin, "-o", "json", "run", "create", "-f",
		specFile(t, "steps:\n- name: a\n  command: 'true'\n---\nsteps:\n- name: b\n  command: 'true'\n"))
	require.Equal(t, 0, ok.code, ok.stderr)
	require.Len(t, strings.Split(strings.TrimSpace(ok.stdout), "\n"), 2, "a JSON line per run: %s", ok.stdout)
}
