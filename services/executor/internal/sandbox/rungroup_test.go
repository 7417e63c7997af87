package sandbox_test

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
	"github.com/stretchr/testify/require"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("giving a directory any group needs root")
	}
}

// TestRunGroupsGiveEachRunItsOwn: two runs' directories get two groups; one
// run's directory made by two allocators at once gets one; a removed run
// directory's group is free again.
func TestRunGroupsGiveEachRunItsOwn(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	locks, data := t.TempDir(), t.TempDir()
	gids := sandbox.Range{First: 210000, Last: 210001}
	a, err := sandbox.NewRunGroups(locks, gids)
	require.NoError(t, err)
	b, err := sandbox.NewRunGroups(locks, gids)
	require.NoError(t, err)

	run1 := filepath.Join(data, "runs", "p", "d", "one")
	got := make([]uint32, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			gid, err := []*sandbox.RunGroups{a, b}[i%2].MakeRunDir(run1)
			require.NoError(t, err)
			got[i] = gid
		})
	}
	wg.Wait()
	for _, gid := range got {
		require.Equal(t, got[0], gid, "one run directory, one group")
	}
	fi, err := os.Stat(run1)
	require.NoError(t, err)
	require.Equal(t, sandbox.RunDirMode, fi.Mode())
	require.Equal(t, got[0], fi.Sys().(*syscall.Stat_t).Gid)
	entries, err := os.ReadDir(filepath.Dir(run1))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no directory made aside is left")
	parent, err := os.Stat(filepath.Dir(run1))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o711), parent.Mode().Perm())

	run2 := filepath.Join(data, "runs", "p", "d", "two")
	gid2, err := b.MakeRunDir(run2)
	require.NoError(t, err)
	require.NotEqual(t, got[0], gid2, "another run, another group")
	_, err = a.MakeRunDir(filepath.Join(data, "runs", "p", "d", "three"))
	require.ErrorIs(t, err, sandbox.ErrExhausted)

	require.NoError(t, os.RemoveAll(run1))
	gid3, err := a.MakeRunDir(filepath.Join(data, "runs", "p", "d", "three"))
	require.NoError(t, err)
	require.Equal(t, got[0], gid3, "the removed run's group is free")
}

// TestRunGroupsAdoptAnUnsandboxedDirectory: a run directory made without
// the sandbox is given a group and the run directory's mode.
func TestRunGroupsAdoptAnUnsandboxedDirectory(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	groups, err := sandbox.NewRunGroups(t.TempDir(), sandbox.Range{First: 210100, Last: 210100})
	require.NoError(t, err)
	run := filepath.Join(t.TempDir(), "runs", "p", "d", "r")
	require.NoError(t, os.MkdirAll(run, 0o755))
	gid, err := groups.MakeRunDir(run)
	require.NoError(t, err)
	require.Equal(t, uint32(210100), gid)
	fi, err := os.Stat(run)
	require.NoError(t, err)
	require.Equal(t, sandbox.RunDirMode, fi.Mode())
}
