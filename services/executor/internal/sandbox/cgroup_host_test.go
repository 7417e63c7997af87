package sandbox_test

import (
	"os"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
	"github.com/stretchr/testify/require"
)

// TestCgroupBoundsMemory runs only where the host delegates a cgroup v2 to
// the test process, alone in it (e.g. `systemd-run --scope -p
// Delegate=yes go test ...`): an attempt whose step asks for 32 MiB is
// killed when it holds 128 MiB. Elsewhere it logs why not.
func TestCgroupBoundsMemory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	cgroups, why := sandbox.DetectCgroups("/sys/fs/cgroup", self)
	if cgroups == nil {
		t.Skip("no cgroup v2 delegated here: " + why)
	}
	box, err := sandbox.New(sandbox.Config{LockDir: t.TempDir(), Cgroups: cgroups})
	require.NoError(t, err)
	a, err := box.Enter(1, sandbox.DefaultRunGIDs.First, domain.Resources{MemoryBytes: 32 << 20})
	require.NoError(t, err)
	defer a.Close(true)
	dir := t.TempDir()
	require.NoError(t, os.Chown(dir, int(a.UID()), int(a.UID())))
	p, err := runner.Start(runner.Spec{Command: "head -c 128M /dev/zero | tail > /dev/null", Dir: dir,
		Env: []string{"PATH=/usr/bin:/bin"}, RunAs: a.Credential(), Isolation: a.Isolation(false, dir)})
	require.NoError(t, err)
	res := p.Wait()
	require.NotEqual(t, 0, res.ExitCode, "the memory limit kills it: %s", res.Stderr)
}
