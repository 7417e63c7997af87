package api_test

import (
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/stretchr/testify/require"
)

// TestNewAttemptSpecCarriesTheSandboxFields: the executor gets the step's
// network and resources, and neither when the step has none.
func TestNewAttemptSpecCarriesTheSandboxFields(t *testing.T) {
	t.Parallel()
	key := domain.ActionKey{RunKey: domain.RunKey{Project: "p", Domain: "d", Run: "r"}, Action: "s"}
	spec, err := api.NewAttemptSpec(1, 1, key, 0, nil, domain.Step{Name: "s", Plugin: domain.PluginShell, Command: "x",
		Network: domain.NetworkNone, Resources: &domain.Resources{CPUMillis: 500, MemoryBytes: 64 << 20}})
	require.NoError(t, err)
	require.Equal(t, domain.NetworkNone, *spec.Network)
	require.Equal(t, int64(500), *spec.Resources.CpuMillis)
	require.Equal(t, int64(64<<20), *spec.Resources.MemoryBytes)

	spec, err = api.NewAttemptSpec(1, 1, key, 0, nil, domain.Step{Name: "s", Plugin: domain.PluginShell, Command: "x"})
	require.NoError(t, err)
	require.Nil(t, spec.Network)
	require.Nil(t, spec.Resources)
}
