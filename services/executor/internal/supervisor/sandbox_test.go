package supervisor_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/stretchr/testify/require"
)

// The sandbox every sandboxed test of the package shares: one lock
// directory, so that parallel tests never lease one uid.
var (
	boxOnce sync.Once
	box     *sandbox.Sandbox
	boxErr  error
)

// testUIDs and testRunGIDs are the package's, apart from other packages'.
var (
	testUIDs    = sandbox.Range{First: 201000, Last: 201999}
	testRunGIDs = sandbox.Range{First: 202000, Last: 202999}
)

// sandboxed returns a supervisor config with the package's sandbox and a
// data directory any user may pass through; it skips the test without root.
func sandboxed(t *testing.T) supervisor.Config {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the sandbox needs root")
	}
	boxOnce.Do(func() {
		box, boxErr = sandbox.New(sandbox.Config{UIDs: testUIDs, RunGIDs: testRunGIDs,
			LockDir: filepath.Join(os.TempDir(), "capstan-supervisor-test-locks")})
	})
	require.NoError(t, boxErr)
	data := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(data), 0o711)) // t.TempDir's own is 0700
	return supervisor.Config{DataDir: data, Sandbox: box}
}

func owner(t *testing.T, path string) (uid, gid uint32, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode()
}

// TestSandboxedAttemptsAreApart: two attempts of two runs, at once, each
// run as a user of its own from the range, with its run's group; each
// work directory is 0700 and its user's, each run directory its run's
// group's; HOME is the work directory; what an attempt makes in its run's
// directory its run's other tasks may write; neither attempt can read the
// other's directories or process environment.
func TestSandboxedAttemptsAreApart(t *testing.T) {
	t.Parallel()
	cfg := sandboxed(t)
	rec := &recorder{}
	s := newSupervisor(t, rec, cfg)
	runDir := func(run string) string { return filepath.Join(cfg.DataDir, "runs", "proj", "dev", run) }
	cmd := `id -u; id -g; id -G; echo "$HOME"; echo shared > "$CAPSTAN_RUN_DIR/f"; stat -c %a "$CAPSTAN_RUN_DIR/f"
		read -r pid _ < /proc/self/stat; echo "$pid" > "$CAPSTAN_RUN_DIR/pid"
		while [ ! -s "$CAPSTAN_RUN_DIR/other" ]; do sleep 0.01; done
		cat "$OTHER_WORK/.capstan/inputs/x" 2>&1 | sed 's/.*: //'
		ls "$OTHER_RUN" 2>&1 | sed 's/.*: //'
		cat /proc/$(cat "$CAPSTAN_RUN_DIR/other")/environ 2>&1 >/dev/null | sed 's/.*: //'
		: > "$CAPSTAN_RUN_DIR/done"
		while [ ! -e "$CAPSTAN_RUN_DIR/go" ]; do sleep 0.01; done`
	specs := map[int64]workerapi.AttemptSpec{}
	for id, run := range map[int64]string{1: "run-a", 2: "run-b"} {
		sp := withIO(id, cmd, nil, map[string]string{"x": "input"})
		sp.Run = run
		sp.Env = map[string]string{"SECRET": "of " + run,
			"OTHER_RUN":  runDir(map[int64]string{1: "run-b", 2: "run-a"}[id]),
			"OTHER_WORK": filepath.Join(cfg.DataDir, "attempts", strconv.FormatInt(3-id, 10))}
		specs[id] = sp
	}
	for id, sp := range specs {
		require.NoError(t, s.Start(sp))
		rec.await(t, id, api.TaskStateRUNNING)
	}
	work := map[int64]string{1: filepath.Join(cfg.DataDir, "attempts", "1"), 2: filepath.Join(cfg.DataDir, "attempts", "2")}
	pids := map[int64][]byte{}
	for id := range specs {
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(filepath.Join(runDir(specs[id].Run), "pid"))
			pids[id] = b
			return err == nil && len(b) > 0
		}, waitFor, tick)
		uid, _, mode := owner(t, work[id])
		require.Equal(t, os.ModeDir|0o700, mode, "the work directory is its user's alone")
		require.True(t, uid >= testUIDs.First && uid <= testUIDs.Last, "uid %d from the range", uid)
	}
	for id, sp := range specs {
		require.NoError(t, os.WriteFile(filepath.Join(runDir(sp.Run), "other"), pids[3-id], 0o644))
	}
	for _, sp := range specs { // neither ends before both have tried the other
		require.Eventually(t, func() bool {
			_, err := os.Stat(filepath.Join(runDir(sp.Run), "done"))
			return err == nil
		}, waitFor, tick)
	}
	for _, sp := range specs {
		require.NoError(t, os.WriteFile(filepath.Join(runDir(sp.Run), "go"), nil, 0o644))
	}
	uids := map[string]bool{}
	for id, sp := range specs {
		final := rec.await(t, id, api.TaskStateSUCCEEDED)
		lines := strings.Split(strings.TrimSpace(*final.Stdout), "\n")
		uid, gid, runMode := owner(t, runDir(sp.Run))
		require.Equal(t, uint32(0), uid)
		require.Equal(t, sandbox.RunDirMode, runMode)
		require.Equal(t, []string{lines[0], lines[0], lines[0] + " " + strconv.Itoa(int(gid)), work[id], "660",
			"Permission denied", "Permission denied", "Permission denied"}, lines,
			"uid, gid, groups, HOME, the shared file's mode, the other's input, run directory and environment: %s",
			*final.Stderr)
		uids[lines[0]] = true
	}
	require.Len(t, uids, 2, "two users")
}

// TestSandboxedAttemptEndsWholly: an attempt's setsid process ends with
// it, and the attempt's user owns no process once it is reported.
func TestSandboxedAttemptEndsWholly(t *testing.T) {
	t.Parallel()
	cfg := sandboxed(t)
	rec := &recorder{}
	s := newSupervisor(t, rec, cfg)
	require.NoError(t, s.Start(spec(5, `setsid sleep 600 & sleep 0.1; id -u`)))
	final := rec.await(t, 5, api.TaskStateSUCCEEDED)
	uid, err := strconv.ParseUint(strings.TrimSpace(*final.Stdout), 10, 32)
	require.NoError(t, err)
	require.Empty(t, proctest.UserProcs(uint32(uid)), "no process of the attempt's user is left")
}

// TestNetworkNoneStepHasNoNetwork: a network: none attempt reaches no
// address but its own loopback's.
func TestNetworkNoneStepHasNoNetwork(t *testing.T) {
	t.Parallel()
	cfg := sandboxed(t)
	rec := &recorder{}
	s := newSupervisor(t, rec, cfg)
	none := "none"
	sp := spec(6, `awk 'NR > 2 { printf "%s ", $1 }' /proc/net/dev`)
	sp.Network = &none
	require.NoError(t, s.Start(sp))
	final := rec.await(t, 6, api.TaskStateSUCCEEDED)
	require.Equal(t, "lo: ", *final.Stdout)
}

// TestSandboxedOutputMustBeTheAttemptsOwn: a file in the outputs
// directory that is not the attempt's user's (a hard link to another's
// file) is refused.
func TestSandboxedOutputMustBeTheAttemptsOwn(t *testing.T) {
	t.Parallel()
	cfg := sandboxed(t)
	rec := &recorder{}
	s := newSupervisor(t, rec, cfg)
	planted := filepath.Join(cfg.DataDir, "planted")
	sp := withIO(7, `echo mine > "$CAPSTAN_OUTPUTS_DIR/mine"; touch "$CAPSTAN_RUN_DIR/ready"
		while [ ! -e "$CAPSTAN_OUTPUTS_DIR/theirs" ]; do sleep 0.01; done`, []string{"mine", "theirs"}, nil)
	require.NoError(t, s.Start(sp))
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(cfg.DataDir, "runs", "proj", "dev", "run-1", "ready"))
		return err == nil
	}, waitFor, tick)
	require.NoError(t, os.WriteFile(planted, []byte("root's"), 0o600))
	require.NoError(t, os.Link(planted, filepath.Join(cfg.DataDir, "attempts", "7", ".capstan", "outputs", "theirs")))
	final := rec.await(t, 7, api.TaskStateFAILED)
	require.Equal(t, fmt.Sprintf("output %q is not a file of the attempt's own in $CAPSTAN_OUTPUTS_DIR", "theirs"),
		*final.Error)
}
