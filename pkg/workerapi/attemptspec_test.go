package workerapi_test

import (
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/stretchr/testify/require"
)

// TestNewAttemptSpecCarriesTheSandboxFields: the executor gets the step's
// network and resources, and neither when the step has none.
func TestNewAttemptSpecCarriesTheSandboxFields(t *testing.T) {
	t.Parallel()
	key := domain.ActionKey{RunKey: domain.RunKey{Project: "p", Domain: "d", Run: "r"}, Action: "s"}
	spec, err := workerapi.NewAttemptSpec(1, 1, key, 0, nil, domain.Step{Name: "s", Plugin: domain.PluginShell, Command: "x",
		Network: domain.NetworkNone, Resources: &domain.Resources{CPUMillis: 500, MemoryBytes: 64 << 20}})
	require.NoError(t, err)
	require.Equal(t, domain.NetworkNone, *spec.Network)
	require.Equal(t, int64(500), *spec.Resources.CpuMillis)
	require.Equal(t, int64(64<<20), *spec.Resources.MemoryBytes)

	spec, err = workerapi.NewAttemptSpec(1, 1, key, 0, nil, domain.Step{Name: "s", Plugin: domain.PluginShell, Command: "x"})
	require.NoError(t, err)
	require.Nil(t, spec.Network)
	require.Nil(t, spec.Resources)
}

// TestNewAttemptSpecCarriesTheTimeLimit: timeout_ms is the step's
// attempt_timeout, else its timeout, absent when it has neither.
func TestNewAttemptSpecCarriesTheTimeLimit(t *testing.T) {
	t.Parallel()
	key := domain.ActionKey{RunKey: domain.RunKey{Project: "p", Domain: "d", Run: "r"}, Action: "s"}
	for _, c := range []struct {
		attempt, step string
		want          *int64
	}{
		{"", "", nil},
		{"1500ms", "1h", ptr(int64(1500))},
		{"", "2s", ptr(int64(2000))},
	} {
		spec, err := workerapi.NewAttemptSpec(1, 1, key, 0, nil, domain.Step{Name: "s", Plugin: domain.PluginHTTP,
			HTTP: &domain.HTTPSpec{URL: "http://x"}, AttemptTimeout: c.attempt, Timeout: c.step})
		require.NoError(t, err)
		require.Equal(t, c.want, spec.TimeoutMs, "attempt_timeout %q, timeout %q", c.attempt, c.step)
	}
}

func ptr[T any](v T) *T { return &v }
