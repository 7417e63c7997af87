package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/stretchr/testify/require"
)

func shellTask(t *testing.T, command string, args ...string) *plugin.Task {
	t.Helper()
	return &plugin.Task{ID: 1, Spec: domain.PluginSpec{Plugin: domain.PluginShell, Command: command, Args: args},
		Dir: t.TempDir(), HostEnv: os.Environ(), LogLimit: 1 << 10}
}

// TestShellArgsRunWithoutAShell: args are an argv, not a script: no word
// splitting, no expansion.
func TestShellArgsRunWithoutAShell(t *testing.T) {
	t.Parallel()
	task := shellTask(t, "", "printf", "%s|", "a b", "$HOME", "*")
	tr, err := until(t, plugin.Shell{}, task)
	require.NoError(t, err)
	require.Equal(t, plugin.PhaseSuccess, tr.Phase)
	require.Equal(t, "a b|$HOME|*|", string(tr.Stdout))
}

// TestShellExecFailures: a program that does not exist, may not be
// executed or is no program is the platform's failure to start the work:
// Handle's error, code ExecFailed.
func TestShellExecFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec, noProgram := filepath.Join(dir, "not-exec"), filepath.Join(dir, "garbage")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	require.NoError(t, os.WriteFile(noProgram, []byte{0x7f, 0x00, 0x01}, 0o755))
	for _, argv0 := range []string{"/no/such/binary", "no-such-binary-on-path", notExec, noProgram, dir} {
		_, err := plugin.Shell{}.Handle(context.Background(), shellTask(t, "", argv0))
		require.Error(t, err, argv0)
		require.Equal(t, plugin.CodeExecFailed, plugin.SystemCode(err), "%s: %v", argv0, err)
	}
}
