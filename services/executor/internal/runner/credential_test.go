package runner_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/stretchr/testify/require"
)

func TestParseCredential(t *testing.T) {
	t.Parallel()
	c, err := runner.ParseCredential("10001:10002")
	require.NoError(t, err)
	require.Equal(t, runner.Credential{UID: 10001, GID: 10002}, c)
	require.Equal(t, "10001:10002", c.String())
	for _, bad := range []string{"", "10001", "a:b", "1:-2", "1:2:3", "99999999999:1"} {
		_, err := runner.ParseCredential(bad)
		require.Error(t, err, bad)
	}
}

// TestRunAsDropsToTheUser: with RunAs, the attempt's process has that uid,
// gid and no supplementary group, and cannot read the executor's
// environment. It needs root to switch users, so it runs only as root.
func TestRunAsDropsToTheUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	cmd := fmt.Sprintf("id -u; id -g; id -G; cat /proc/%d/environ >/dev/null 2>&1 && echo readable || echo denied",
		os.Getpid())
	p, err := runner.Start(runner.Spec{Command: cmd, Dir: "/", LogLimit: 4096,
		RunAs: &runner.Credential{UID: 65534, GID: 65534}})
	require.NoError(t, err)
	res := p.Wait()
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	require.Equal(t, []string{"65534", "65534", "65534", "denied"}, strings.Fields(string(res.Stdout)))
}
