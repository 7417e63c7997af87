package sandbox_test

import (
	"os"
	"testing"

	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
	"github.com/stretchr/testify/require"
)

// TestProbeTellsWhetherAttemptsCanBeSandboxed: as root the probe runs a
// process as a leased user in every namespace; otherwise it fails.
func TestProbeTellsWhetherAttemptsCanBeSandboxed(t *testing.T) {
	t.Parallel()
	box, err := sandbox.New(sandbox.Config{LockDir: t.TempDir(), UIDs: sandbox.Range{First: 200200, Last: 200209},
		RunGIDs: sandbox.Range{First: 200300, Last: 200309}})
	require.NoError(t, err)
	require.Equal(t, "uid+pidns+netns+rlimit", box.Name())
	err = box.Probe(t.TempDir())
	if os.Geteuid() == 0 {
		require.NoError(t, err)
	} else {
		require.Error(t, err)
	}
}

func TestNewRefusesOverlappingRanges(t *testing.T) {
	t.Parallel()
	_, err := sandbox.New(sandbox.Config{LockDir: t.TempDir(), UIDs: sandbox.Range{First: 100, Last: 200},
		RunGIDs: sandbox.Range{First: 200, Last: 300}})
	require.ErrorContains(t, err, "overlaps")
}
