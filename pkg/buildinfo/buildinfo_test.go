package buildinfo

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadPrefersTheStampedValues(t *testing.T) {
	Version, Commit, Date = "v1.2.3", "abc123", "2026-01-02T03:04:05Z"
	t.Cleanup(func() { Version, Commit, Date = "", "", "" })
	require.Equal(t, Info{Version: "v1.2.3", Commit: "abc123", Time: "2026-01-02T03:04:05Z", GoVersion: runtime.Version()}, Read())
}

func TestReadFallsBackToTheToolchain(t *testing.T) {
	info := Read()
	require.NotEmpty(t, info.Version, "the module version, or (devel)")
	require.Equal(t, runtime.Version(), info.GoVersion)
}
