package e2e

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// TestCLITools runs the real capstan binary against the real services for
// what an operator relies on besides runs: version, shell completion from
// the live API, a black-holed API's timeout and hint, lint, run wait's
// timeout exit and enum flags refused locally, and an example in every
// help.
func TestCLITools(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1})
	bin := buildCLI(t)

	t.Run("version", func(t *testing.T) {
		res := runCLI(t, s, bin, "-o", "json", "version")
		require.Equal(t, 0, res.code, res.stderr)
		require.NotEmpty(t, jq(t, ".server.version", res.stdout), res.stdout)
		require.Equal(t, jq(t, ".client.go_version", res.stdout), jq(t, ".server.go_version", res.stdout))
	})

	t.Run("completions", func(t *testing.T) {
		first := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "greet", Command: ptr("true")}}})
		second := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "greet", Command: ptr("true")}}})
		res := runCLI(t, s, bin, "__complete", "run", "get", "")
		require.Equal(t, 0, res.code, res.stderr)
		names := strings.Split(strings.TrimSpace(res.stdout), "\n")
		require.Contains(t, names, first, res.stdout)
		require.Contains(t, names, second, res.stdout)
		require.Equal(t, ":4", names[len(names)-1], "no file completion")
		res = runCLI(t, s, bin, "__complete", "run", "get", first[:len(first)-1])
		require.Contains(t, res.stdout, first+"\n")
		require.NotContains(t, res.stdout, second+"\n", "the prefix filters")
		res = runCLI(t, s, bin, "__complete", "logs", first, "")
		require.True(t, strings.HasPrefix(res.stdout, "greet\n"), "a run's steps: %q", res.stdout)
	})

	t.Run("black hole", func(t *testing.T) {
		hole := blackHole(t)
		start := time.Now()
		res := runCLI(t, &Stack{APIURL: hole, Token: s.Token}, bin, "--request-timeout", "500ms", "run", "get", "r1")
		require.Less(t, time.Since(start), 10*time.Second, "bounded by --request-timeout")
		require.Equal(t, 3, res.code, res.stderr)
		require.Equal(t, "capstan: cannot reach the Capstan API at "+hole+
			" (set CAPSTAN_API or --api): no answer within 500ms (--request-timeout)\n", res.stderr)
	})

	t.Run("lint", func(t *testing.T) {
		bad := specFile(t, "steps:\n- name: one\n  command: 'true'\n- name: two\n  comand: 'true'\n")
		res := runCLI(t, s, bin, "lint", "-f", bad)
		require.Equal(t, 2, res.code, res.stderr)
		require.Equal(t, bad+`:5: steps[1].comand: unknown field (did you mean "command"?)`+"\n", res.stderr)
		create := runCLI(t, s, bin, "run", "create", "-f", bad)
		require.Equal(t, 2, create.code, "run create -f checks the file the same way first: %s", create.stderr)
		require.Equal(t, res.stderr, create.stderr)
		good := runCLI(t, s, bin, "lint", "-f", specFile(t, "steps:\n- name: one\n  command: 'true'\n"))
		require.Equal(t, 0, good.code, good.stderr)
	})

	t.Run("wait timeout", func(t *testing.T) {
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "nap", Command: ptr("sleep 60")}}})
		res := runCLI(t, s, bin, "run", "wait", name, "--timeout", "1s")
		require.Equal(t, 4, res.code, "a wait past --timeout: %s", res.stderr)
		require.Contains(t, res.stderr, "run "+name+" did not end in time")
		require.Equal(t, 0, runCLI(t, s, bin, "run", "abort", name).code)
	})

	t.Run("enum flags", func(t *testing.T) {
		for _, c := range []struct{ args []string }{
			{[]string{"run", "list", "--phase", "BOGUS"}},
			{[]string{"schedule", "trigger", "nightly", "--overlap", "sometimes"}},
			{[]string{"aborts", "--state", "lost"}},
		} {
			res := runCLI(t, &Stack{APIURL: "http://127.0.0.1:1"}, bin, c.args...)
			require.Equal(t, 2, res.code, "%q: %s", c.args, res.stderr)
			require.Contains(t, res.stderr, `for "`+c.args[len(c.args)-2]+`" flag`, "names the flag")
			require.Contains(t, res.stderr, " is not one of ", "lists the values")
			require.NotContains(t, res.stderr, "cannot reach", "refused before any request")
		}
	})

	t.Run("examples in help", func(t *testing.T) {
		for _, args := range [][]string{{"--help"}, {"run", "get", "--help"}, {"run", "list", "--help"},
			{"lint", "--help"}, {"config", "set-context", "--help"}, {"version", "--help"}} {
			res := runCLI(t, s, bin, args...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, "\nExamples:\n  capstan ", "%q", args)
		}
	})
}

// blackHole is a 127.0.0.1 address that accepts connections and never
// answers.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}
