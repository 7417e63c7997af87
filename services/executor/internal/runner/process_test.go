package runner_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/stretchr/testify/require"
)

// helperEnv makes the test binary act as a tiny executor for the
// parent-death tests: it starts the command in the variable through the
// runner, prints the process's pid and blocks.
const helperEnv = "RUNNER_TEST_PDEATHSIG_HELPER"

// isolatedHelperEnv, set to a uid, makes the helper run the command as
// that user in a PID namespace of its own.
const isolatedHelperEnv = "RUNNER_TEST_ISOLATED_UID"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		pdeathsigHelper()
		return
	}
	proctest.Main(m)
}

func pdeathsigHelper() {
	spec := runner.Spec{Command: os.Getenv(helperEnv), Dir: os.TempDir(), LogLimit: 10}
	if v := os.Getenv(isolatedHelperEnv); v != "" {
		uid, _ := strconv.ParseUint(v, 10, 32)
		spec.RunAs = &runner.Credential{UID: uint32(uid), GID: uint32(uid)}
		spec.Isolation = &runner.Isolation{PIDNamespace: true}
		spec.Dir = "/"
	}
	p, err := runner.Start(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(p.Pid())
	p.Wait() // until killed
	os.Exit(1)
}

const waitFor, tick = 10 * time.Second, 5 * time.Millisecond

func start(t *testing.T, command string, env ...string) *runner.Process {
	t.Helper()
	p, err := runner.Start(runner.Spec{Command: command, Dir: t.TempDir(), Env: env, LogLimit: 64 << 10})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = p.Kill(0)
		p.Wait()
	})
	return p
}

func TestExitCodeAndOutput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		command        string
		code           int
		sig            syscall.Signal
		stdout, stderr string
	}{
		{"success", "echo out; echo err >&2", 0, 0, "out\n", "err\n"},
		{"exit code", "printf partial; exit 3", 3, 0, "partial", ""},
		{"killed by a signal", "kill -KILL $$", 137, syscall.SIGKILL, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := start(t, tt.command).Wait()
			require.Equal(t, tt.code, res.ExitCode)
			require.Equal(t, tt.sig, res.Signal)
			require.Equal(t, tt.stdout, string(res.Stdout))
			require.Equal(t, tt.stderr, string(res.Stderr))
			require.False(t, res.Truncated)
		})
	}
}

func TestOutputKeepsLast64KiB(t *testing.T) {
	t.Parallel()
	// 16384 lines of 64 bytes: exactly 1 MiB; the last 64 KiB are the last 1024 lines.
	res := start(t, `awk 'BEGIN { for (i = 0; i < 16384; i++) printf "%063d\n", i }'; echo small >&2`).Wait()
	require.Equal(t, 0, res.ExitCode)
	require.True(t, res.Truncated)
	require.Len(t, res.Stdout, 64<<10)
	var want strings.Builder
	for i := 16384 - 1024; i < 16384; i++ {
		fmt.Fprintf(&want, "%063d\n", i)
	}
	require.Equal(t, want.String(), string(res.Stdout))
	require.Equal(t, "small\n", string(res.Stderr))
}

func TestEnvAndDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := runner.Start(runner.Spec{Command: `echo "$FOO|$BAR|$(pwd)"`, Dir: dir,
		Env: []string{"FOO=first", "BAR=bar", "FOO=last"}, LogLimit: 1024})
	require.NoError(t, err)
	res := p.Wait()
	real, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	require.Equal(t, "last|bar|"+real+"\n", string(res.Stdout))
}

func TestStartFailsWithoutDir(t *testing.T) {
	t.Parallel()
	_, err := runner.Start(runner.Spec{Command: "true", Dir: filepath.Join(t.TempDir(), "missing")})
	require.Error(t, err)
}

// readPid waits until path holds a pid followed by a newline.
func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, waitFor, tick)
	return pid
}

func requireGone(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		require.Eventually(t, func() bool { return proctest.Gone(pid) }, waitFor, tick, "pid %d is still there", pid)
	}
}

func TestKillReachesGrandchild(t *testing.T) {
	t.Parallel()
	pidfile := filepath.Join(t.TempDir(), "pid")
	p := start(t, "sleep 600 & echo $! > "+pidfile+"; wait")
	grandchild := readPid(t, pidfile)
	require.False(t, proctest.Gone(grandchild))

	require.NoError(t, p.Kill(5*time.Second))
	res := p.Wait()
	require.Equal(t, syscall.SIGTERM, res.Signal)
	requireGone(t, p.Pid(), grandchild)
}

func TestKillEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	ready := filepath.Join(t.TempDir(), "ready")
	p := start(t, "trap '' TERM; touch "+ready+"; sleep 600")
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, waitFor, tick)

	const grace = 300 * time.Millisecond
	began := time.Now()
	require.NoError(t, p.Kill(grace))
	require.GreaterOrEqual(t, time.Since(began), grace, "SIGTERM is ignored: only SIGKILL after the grace ends it")
	require.Equal(t, syscall.SIGKILL, p.Wait().Signal)
	requireGone(t, p.Pid())
}

func TestExitSweepsLeftovers(t *testing.T) {
	t.Parallel()
	pidfile := filepath.Join(t.TempDir(), "pid")
	p := start(t, "sleep 600 & echo $! > "+pidfile)
	res := p.Wait()
	require.Equal(t, 0, res.ExitCode)
	requireGone(t, readPid(t, pidfile))
}

func TestKillAfterExitIsNoop(t *testing.T) {
	t.Parallel()
	p := start(t, "true")
	p.Wait()
	require.NoError(t, p.Kill(time.Second))
	require.NoError(t, p.Signal(syscall.SIGKILL))
}

// startHelper starts the test binary as a tiny executor running command and
// returns it with the pid of the attempt's process (its group leader).
func startHelper(t *testing.T, command string, env ...string) (*exec.Cmd, int) {
	t.Helper()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(append(os.Environ(), helperEnv+"="+command), env...)
	stdout, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err)
	require.False(t, proctest.Gone(pid))
	return helper, pid
}

func TestPdeathsigKillsProcessWhenExecutorDies(t *testing.T) {
	t.Parallel()
	helper, pid := startHelper(t, "exec sleep 600")
	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	_ = helper.Wait()
	requireGone(t, pid)
}

// TestExecutorDeathKillsBackgroundGrandchildren: a parent-death signal only
// reaches the process it is set on, so a shell's `sleep 600 &` used to
// outlive kill -9 of the executor; the shim kills the whole group.
func TestExecutorDeathKillsBackgroundGrandchildren(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shellFile, bgFile := filepath.Join(dir, "shell"), filepath.Join(dir, "bg")
	helper, group := startHelper(t, "echo $$ > "+shellFile+"; sleep 600 & echo $! > "+bgFile+"; "+
		"(trap '' TERM; exec sleep 600) & wait")
	shell, bg := readPid(t, shellFile), readPid(t, bgFile)
	require.False(t, proctest.Gone(bg))

	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	_ = helper.Wait()
	requireGone(t, group, shell, bg)
	require.Eventually(t, func() bool { return len(liveInGroup(group)) == 0 }, waitFor, tick,
		"no process of the attempt's group is left: %v", liveInGroup(group))
}

// liveInGroup lists the pids of process group pgid that are not zombies.
func liveInGroup(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// After "(comm)": state, ppid, pgrp, ...
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestStartFailsWhenTheShellCannotStart(t *testing.T) {
	t.Parallel()
	// The shim starts (the directory exists) but the shell's working
	// directory vanishes first: emulate with a file in place of a directory.
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err := runner.Start(runner.Spec{Command: "true", Dir: file})
	require.Error(t, err)
}

// TestStartArgsTellsAnExecFailureApart: an argv is executed without a
// shell, and a program that cannot be executed (missing, not executable,
// not a program) is an *ExecError, unlike the shim's own start failing.
func TestStartArgsTellsAnExecFailureApart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := runner.Start(runner.Spec{Args: []string{"printf", "%s", "a b", "$X"}, Dir: dir, LogLimit: 64})
	require.NoError(t, err)
	res := p.Wait()
	require.Equal(t, "a b$X", string(res.Stdout))

	notExec := filepath.Join(dir, "script")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	for _, argv0 := range []string{"/no/such/binary", notExec, dir} {
		_, err := runner.Start(runner.Spec{Args: []string{argv0}, Dir: dir})
		var ee *runner.ExecError
		require.ErrorAs(t, err, &ee, argv0)
	}
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = runner.Start(runner.Spec{Args: []string{"true"}, Dir: file})
	var ee *runner.ExecError
	require.Error(t, err)
	require.False(t, errors.As(err, &ee), "a working directory that is a file is no exec failure: %v", err)
}
