package runner_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Each isolation test runs its processes as a user of its own, so that "no
// process of the user is left" says exactly that the test's are gone.
const (
	uidNamespaceExit = 190001 + iota
	uidNamespaceKill
	uidNamespaceStubborn
	uidExecutorDeath
	uidNoNetwork
	uidMaxProcs
	uidMaxData
	uidHold
	uidPrivateTmp
)

// requireRoot skips a test that needs the executor's privileges: switching
// users and making namespaces.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("isolation needs root")
	}
}

// isolated starts command as uid in a PID namespace of its own, with iso's
// other fields, in a directory uid owns.
func isolated(t *testing.T, uid uint32, iso runner.Isolation, command string) *runner.Process {
	t.Helper()
	iso.PIDNamespace = true
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	require.NoError(t, os.Chown(dir, int(uid), int(uid)))
	p, err := runner.Start(runner.Spec{Command: command, Dir: dir, LogLimit: 64 << 10,
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}, RunAs: &runner.Credential{UID: uid, GID: uid},
		Isolation: &iso})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = p.Kill(0)
		p.Wait()
	})
	return p
}

// requireNoneLeft checks that no process of uid is left, at once: a
// namespace's end is reported only once all of its processes are gone.
func requireNoneLeft(t *testing.T, uid uint32) {
	t.Helper()
	require.Empty(t, proctest.UserProcs(uid), "processes of uid %d are left", uid)
}

// TestNamespaceEndsSetsidDescendants: a process that left the attempt's
// process group and session (setsid) is ended with the attempt when its
// shell exits, however it exits.
func TestNamespaceEndsSetsidDescendants(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	p := isolated(t, uidNamespaceExit, runner.Isolation{},
		`setsid sleep 600 & setsid sh -c 'trap "" TERM HUP; sleep 600' & sleep 0.2`)
	res := p.Wait()
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	requireNoneLeft(t, uidNamespaceExit)
}

// TestNamespaceKillEndsEveryProcess: Kill's SIGTERM reaches processes out
// of the group too (the shim passes it on), and its SIGKILL ends the
// namespace, a process that ignores SIGTERM included.
func TestNamespaceKillEndsEveryProcess(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	require.NoError(t, os.Chmod(dir, 0o777))
	// The shell ignores SIGTERM only once its child started: a shell
	// cannot trap a signal that was ignored when it started.
	p := isolated(t, uidNamespaceKill, runner.Isolation{},
		`setsid sh -c 'trap "echo got TERM; exit 0" TERM; touch `+ready+`; while :; do sleep 0.05; done' & `+
			`trap '' TERM; touch `+ready+`-main; wait`)
	require.Eventually(t, func() bool {
		_, err := os.Stat(ready)
		_, errMain := os.Stat(ready + "-main")
		return err == nil && errMain == nil
	}, waitFor, tick)
	require.NoError(t, p.Kill(5*time.Second))
	res := p.Wait()
	require.Contains(t, string(res.Stdout), "got TERM", "the setsid process got the SIGTERM")
	requireNoneLeft(t, uidNamespaceKill)

	stubborn := isolated(t, uidNamespaceStubborn, runner.Isolation{},
		`trap '' TERM; setsid sh -c 'trap "" TERM; touch `+ready+`2; exec sleep 600' & wait`)
	require.Eventually(t, func() bool { _, err := os.Stat(ready + "2"); return err == nil }, waitFor, tick)
	began := time.Now()
	const grace = 300 * time.Millisecond
	require.NoError(t, stubborn.Kill(grace))
	require.GreaterOrEqual(t, time.Since(began), grace, "only SIGKILL after the grace ends it")
	require.Equal(t, syscall.SIGKILL, stubborn.Wait().Signal)
	requireNoneLeft(t, uidNamespaceStubborn)
}

// TestExecutorDeathEndsTheNamespace: kill -9 of the executor ends the
// attempt's namespace, with a setsid process that ignores every catchable
// signal.
func TestExecutorDeathEndsTheNamespace(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	helper, _ := startHelper(t, `setsid sh -c 'trap "" TERM HUP INT; exec sleep 600' & exec sleep 600`,
		isolatedHelperEnv+"="+strconv.Itoa(uidExecutorDeath))
	require.Eventually(t, func() bool { return len(proctest.UserProcs(uidExecutorDeath)) == 2 }, waitFor, tick)
	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	_ = helper.Wait()
	require.Eventually(t, func() bool { return len(proctest.UserProcs(uidExecutorDeath)) == 0 }, waitFor, tick,
		"processes of the attempt are left: %v", proctest.UserProcs(uidExecutorDeath))
}

// TestNoNetworkReachesNothing: with NoNetwork the process sees only a
// loopback interface of its own: a port the host listens on is refused.
func TestNoNetworkReachesNothing(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	probe := fmt.Sprintf(`awk 'NR > 2 { printf "%%s ", $1 }' /proc/net/dev; echo; `+
		`bash -c 'echo > /dev/tcp/127.0.0.1/%d' 2>&1 && echo connected`, port)

	res := isolated(t, uidNoNetwork, runner.Isolation{NoNetwork: true}, probe).Wait()
	require.Equal(t, "lo: \n", strings.SplitAfterN(string(res.Stdout), "\n", 2)[0], "only loopback")
	require.Contains(t, string(res.Stdout), "Connection refused")
	require.NotContains(t, string(res.Stdout), "connected")

	res = isolated(t, uidNoNetwork+100, runner.Isolation{}, probe).Wait()
	require.Contains(t, string(res.Stdout), "connected", "the same probe reaches the host without NoNetwork")
}

// TestLimitsBoundTheProcess: MaxProcs bounds the processes of the user,
// MaxData its private writable memory.
func TestLimitsBoundTheProcess(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	res := isolated(t, uidMaxProcs, runner.Isolation{MaxProcs: 8},
		`i=0; while [ $i -lt 20 ]; do sleep 5 & i=$((i+1)); done 2>/dev/null; echo $i`).Wait()
	require.NotEqual(t, 0, res.ExitCode, "the 9th process cannot be forked: %s", res.Stdout)

	res = isolated(t, uidMaxData, runner.Isolation{MaxData: 32 << 20},
		`dd if=/dev/zero of=/dev/null bs=1M count=1 2>/dev/null && echo small; dd if=/dev/zero of=/dev/null bs=64M count=1 || echo big failed`).Wait()
	require.Equal(t, "small\nbig failed\n", string(res.Stdout), "%s", res.Stderr)
	require.Contains(t, string(res.Stderr), "memory exhausted")
}

// TestHoldKeepsTheFileFromTheProcess: the shim holds Hold's files (a lock
// stays taken) while the attempt's process never sees them, and the umask
// applies to what the process creates.
func TestHoldKeepsTheFileFromTheProcess(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	lock, err := os.Create(filepath.Join(t.TempDir(), "lock"))
	require.NoError(t, err)
	require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX))
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777))
	umask := 0o007
	p := isolated(t, uidHold, runner.Isolation{Hold: []*os.File{lock}, Umask: &umask},
		`ls -l /proc/$$/fd | grep -c `+lock.Name()+`; touch `+dir+`/f; sleep 600`)
	require.NoError(t, lock.Close()) // now only the shim holds it
	again, err := os.Open(lock.Name())
	require.NoError(t, err)
	defer again.Close()
	require.ErrorIs(t, unix.Flock(int(again.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK,
		"the shim holds the lock")
	require.Eventually(t, func() bool { _, err := os.Stat(dir + "/f"); return err == nil }, waitFor, tick)
	fi, err := os.Stat(dir + "/f")
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o660), fi.Mode().Perm())

	require.NoError(t, p.Kill(time.Second))
	res := p.Wait()
	require.Equal(t, "0\n", string(res.Stdout), "the shell does not hold the lock")
	require.NoError(t, unix.Flock(int(again.Fd()), unix.LOCK_EX|unix.LOCK_NB), "released with the shim")
	requireNoneLeft(t, uidHold)
}

// TestPrivateTmpIsTheAttempts: what the process writes to /tmp and
// /dev/shm lands in its own directory, not the host's, while a kept
// directory under /tmp (the data directory) stays on its path.
func TestPrivateTmpIsTheAttempts(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	tmp, kept := t.TempDir(), t.TempDir()
	require.NoError(t, os.Chown(tmp, uidPrivateTmp, uidPrivateTmp))
	require.NoError(t, os.WriteFile(filepath.Join(kept, "data"), []byte("kept\n"), 0o644))
	name := fmt.Sprintf("capstan-private-tmp-%d", os.Getpid())
	res := isolated(t, uidPrivateTmp, runner.Isolation{PrivateTmp: tmp, KeepPaths: []string{kept}},
		`echo a > /tmp/`+name+` && echo b > /dev/shm/`+name+`.shm && cat `+kept+`/data && ls /tmp | grep capstan`).Wait()
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	require.Equal(t, "kept\n"+name+"\n"+name+".shm\n", string(res.Stdout),
		"the kept directory on its path; /tmp and /dev/shm are one directory, the attempt's")
	_, err := os.Stat("/tmp/" + name)
	require.ErrorIs(t, err, os.ErrNotExist, "the host's /tmp is untouched")
	b, err := os.ReadFile(filepath.Join(tmp, name))
	require.NoError(t, err)
	require.Equal(t, "a\n", string(b))
}

// TestIsolationNeedsPrivileges: a failure to make the namespace is the
// shim's start failing, not an exec failure.
func TestIsolationNeedsPrivileges(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root may make namespaces")
	}
	_, err := runner.Start(runner.Spec{Command: "true", Dir: t.TempDir(),
		Isolation: &runner.Isolation{PIDNamespace: true}})
	var ee *runner.ExecError
	require.Error(t, err)
	require.False(t, errors.As(err, &ee))
}
