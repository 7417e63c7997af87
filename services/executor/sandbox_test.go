package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
	"github.com/stretchr/testify/require"
)

// gateHelperEnv makes the test binary a would-be executor: it builds the
// supervisor of the environment's config and prints the error, or the
// sandbox's name.
const gateHelperEnv = "EXECUTOR_TEST_GATE_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(gateHelperEnv) != "" {
		gateHelper()
		return
	}
	os.Exit(m.Run())
}

func gateHelper() {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg, err := env.ParseAs[Config]()
	if err == nil {
		var box *sandbox.Sandbox
		var client *agent.Client
		if client, err = agent.NewClient("http://127.0.0.1:1", agent.ClientConfig{}, log); err == nil {
			_, box, err = newSupervisor(cfg, client, plugin.NewDefault(plugin.Config{}), log)
		}
		if err == nil {
			os.Stdout.WriteString("sandbox " + sandboxName(box) + "\n")
			os.Exit(0)
		}
	}
	os.Stdout.WriteString(err.Error() + "\n")
	os.Exit(1)
}

// gate runs the helper, the test binary exe, with env as cred's user
// (nil: the test's own) and returns what it printed and whether it
// started.
func gate(t *testing.T, exe string, cred *syscall.Credential, env ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append([]string{gateHelperEnv + "=1", "PATH=" + os.Getenv("PATH")}, env...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return strings.TrimSpace(string(out)), err == nil
}

// dirFor returns a data directory and a lock directory that uid may use,
// and a copy of the test binary it may execute.
func dirFor(t *testing.T, uid int) (data, locks, exe string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	data, locks, exe = filepath.Join(dir, "data"), filepath.Join(dir, "locks"), filepath.Join(dir, "executor.test")
	for _, d := range []string{data, locks} {
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.Chown(d, uid, uid))
	}
	b, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(exe, b, 0o755))
	return data, locks, exe
}

// TestInsecureGate: an executor that may not sandbox attempts (not root)
// refuses to start, saying why and how to run without; with
// CAPSTAN_EXECUTOR_INSECURE=1 it starts, its sandbox "none". As root it
// starts sandboxed; CAPSTAN_EXECUTOR_RUN_AS needs INSECURE.
func TestInsecureGate(t *testing.T) {
	t.Parallel()
	uid := os.Getuid()
	var unprivileged *syscall.Credential
	if uid == 0 {
		uid, unprivileged = 65534, &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	}
	data, locks, exe := dirFor(t, uid)
	env := []string{"CAPSTAN_DATA_DIR=" + data, "CAPSTAN_EXECUTOR_LOCK_DIR=" + locks,
		"CAPSTAN_EXECUTOR_UID_RANGE=203000-203099", "CAPSTAN_EXECUTOR_RUN_GID_RANGE=203100-203199"}

	out, started := gate(t, exe, unprivileged, env...)
	require.False(t, started, "an executor that cannot sandbox must not start: %s", out)
	require.Contains(t, out, "the executor cannot sandbox attempts")
	require.Contains(t, out, "CAPSTAN_EXECUTOR_INSECURE=1")

	out, started = gate(t, exe, unprivileged, append(env, "CAPSTAN_EXECUTOR_INSECURE=1")...)
	require.True(t, started, out)
	require.Equal(t, "sandbox none", out)

	if unprivileged == nil {
		return // the rest needs root
	}
	rootData, rootLocks, _ := dirFor(t, 0)
	rootEnv := []string{"CAPSTAN_DATA_DIR=" + rootData, "CAPSTAN_EXECUTOR_LOCK_DIR=" + rootLocks,
		"CAPSTAN_EXECUTOR_UID_RANGE=203000-203099", "CAPSTAN_EXECUTOR_RUN_GID_RANGE=203100-203199"}
	out, started = gate(t, exe, nil, rootEnv...)
	require.True(t, started, out)
	require.Equal(t, "sandbox uid+pidns+netns+rlimit", out)

	out, started = gate(t, exe, nil, append(rootEnv, "CAPSTAN_EXECUTOR_RUN_AS=10002:10002")...)
	require.False(t, started)
	require.Contains(t, out, "CAPSTAN_EXECUTOR_RUN_AS applies only with CAPSTAN_EXECUTOR_INSECURE=1")

	hidden := filepath.Join(t.TempDir(), "hidden") // 0700 above the data directory: no attempt could reach it
	require.NoError(t, os.Mkdir(hidden, 0o700))
	out, started = gate(t, exe, nil, "CAPSTAN_DATA_DIR="+filepath.Join(hidden, "data"), "CAPSTAN_EXECUTOR_LOCK_DIR="+rootLocks,
		"CAPSTAN_EXECUTOR_UID_RANGE=203000-203099", "CAPSTAN_EXECUTOR_RUN_GID_RANGE=203100-203199")
	require.False(t, started)
	require.Contains(t, out, "chmod o+x")
}

func TestPassEnvNames(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, bad := range []string{"CAPSTAN_REDIS_ADDR", "A-B", "1X"} {
		_, err := newSandbox(Config{Insecure: true, PassEnv: []string{"OK", bad}}, log)
		require.ErrorContains(t, err, "is not a variable a task may get", bad)
	}
	box, err := newSandbox(Config{Insecure: true, PassEnv: []string{"HTTP_PROXY", "no_proxy"},
		RunAs: &runner.Credential{UID: 1, GID: 1}}, log)
	require.NoError(t, err)
	require.Nil(t, box)
}
