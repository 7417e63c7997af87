package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/stretchr/testify/require"
)

// fakeCgroup makes a directory that looks like a cgroup v2 with
// controllers, holding only pid.
func fakeCgroup(t *testing.T, controllers string, pids ...int) string {
	t.Helper()
	dir := t.TempDir()
	procs := ""
	for _, p := range pids {
		procs += strconv.Itoa(p) + "\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte(controllers+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(procs), 0o644))
	return dir
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// TestDelegateTakesAnOwnCgroup: the executor alone in a cgroup that offers
// controllers moves to a leaf and enables them for the attempts' cgroups;
// a shared cgroup, or one with none of them, is left alone.
func TestDelegateTakesAnOwnCgroup(t *testing.T) {
	t.Parallel()
	own := fakeCgroup(t, "cpuset cpu io memory hugetlb pids", 42)
	c, why := delegate(own, 42)
	require.NotNil(t, c, why)
	require.Equal(t, []string{"cpu", "memory", "pids"}, c.Controllers())
	require.Equal(t, "42", read(t, filepath.Join(own, "capstan-executor", "cgroup.procs")))
	require.Equal(t, "+cpu +memory +pids", read(t, filepath.Join(own, "cgroup.subtree_control")))

	c, why = delegate(fakeCgroup(t, "cpu memory pids", 42, 43), 42)
	require.Nil(t, c)
	require.Contains(t, why, "shares its cgroup")
	c, why = delegate(fakeCgroup(t, "io hugetlb", 42), 42)
	require.Nil(t, c)
	require.Contains(t, why, "no cpu, memory or pids controller")
}

// TestMakeWritesTheStepsLimits: an attempt's cgroup gets memory.max (and
// no swap), cpu.max and pids.max from the step's resources, and only for
// the controllers delegated.
func TestMakeWritesTheStepsLimits(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	c := &Cgroups{base: base, controllers: []string{"cpu", "memory", "pids"}}
	g, err := c.Make(7, domain.Resources{CPUMillis: 1500, MemoryBytes: 256 << 20}, 512)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(base, "attempt-7"), g.Path())
	require.Equal(t, "268435456", read(t, filepath.Join(g.Path(), "memory.max")))
	require.Equal(t, "150000 100000", read(t, filepath.Join(g.Path(), "cpu.max")), "1.5 cores: 150 ms of each 100 ms")
	require.Equal(t, "512", read(t, filepath.Join(g.Path(), "pids.max")))
	require.NotNil(t, g.File())

	small, err := (&Cgroups{base: base, controllers: []string{"cpu"}}).Make(8,
		domain.Resources{CPUMillis: 1, MemoryBytes: 1 << 20}, 512)
	require.NoError(t, err)
	require.Equal(t, "1000 100000", read(t, filepath.Join(small.Path(), "cpu.max")), "at least the kernel's 1 ms")
	_, err = os.Stat(filepath.Join(small.Path(), "memory.max"))
	require.ErrorIs(t, err, os.ErrNotExist, "no memory controller, no memory.max")
	_, err = os.Stat(filepath.Join(small.Path(), "pids.max"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
