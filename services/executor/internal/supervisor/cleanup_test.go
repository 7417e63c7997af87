package supervisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/stretchr/testify/require"
)

// readPids waits until path holds n pids, one a line.
func readPids(t *testing.T, path string, n int) []int {
	t.Helper()
	var pids []int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return len(pids) >= n
	}, waitFor, tick)
	return pids
}

// TestAbortedShellTreeLeavesNoProcess: Flyte's handleAbortAndFinalize "invokes
// p.Abort to stop any in-flight execution" and then "invokes p.Finalize":
// an aborted shell step whose command started a tree of processes leaves
// none of them, and its final report records both steps, in order.
func TestAbortedShellTreeLeavesNoProcess(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{})
	pidfile := filepath.Join(t.TempDir(), "pids")
	sp := spec(5, `sleep 600 & echo $! >> "$PIDS"
		(sleep 600 & echo $! >> "$PIDS"; wait) & echo $! >> "$PIDS"
		echo $$ >> "$PIDS"; wait`)
	sp.Env["PIDS"] = pidfile
	require.NoError(t, s.Start(sp))
	leader := *rec.await(t, 5, api.TaskStateRUNNING).Pid
	pids := append(readPids(t, pidfile, 4), leader)

	before := time.Now().UTC()
	killed, err := s.Abort(context.Background(), 5, workerapi.Aborted, "stop it")
	require.NoError(t, err)
	require.True(t, killed)
	for _, pid := range pids {
		require.Eventually(t, func() bool { return proctest.Gone(pid) }, waitFor, tick, "pid %d is left", pid)
	}
	final := rec.await(t, 5, api.TaskStateKILLED)
	require.NotNil(t, final.Cleanup)
	cleanup := *final.Cleanup
	require.Len(t, cleanup, 2)
	require.Equal(t, workerapi.Abort, cleanup[0].Step)
	require.Equal(t, workerapi.Finalize, cleanup[1].Step)
	require.Nil(t, cleanup[0].Error)
	require.Nil(t, cleanup[1].Error)
	require.False(t, cleanup[0].At.Before(before))
	require.False(t, cleanup[1].At.Before(cleanup[0].At))
}

// TestSpecKillGraceWins: the attempt's kill_grace_ms, not the executor's
// fallback, is the time between SIGTERM and SIGKILL.
func TestSpecKillGraceWins(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{KillGrace: time.Hour})
	sp := spec(6, "trap '' TERM; sleep 600")
	grace := int64(100)
	sp.KillGraceMs = &grace
	require.NoError(t, s.Start(sp))
	rec.await(t, 6, api.TaskStateRUNNING)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	killed, err := s.Abort(ctx, 6, workerapi.Timeout, "")
	require.NoError(t, err, "SIGKILL came after the spec's 100ms, not the fallback's hour")
	require.True(t, killed)
}

// TestAbortedContainerIsStoppedAndRemoved: an aborted container step is
// stopped by its runtime (Abort) and removed (Finalize): no container is
// left. It sets FAKE_DOCKER_LOG, so it does not run in parallel.
func TestAbortedContainerIsStoppedAndRemoved(t *testing.T) {
	log := filepath.Join(t.TempDir(), "docker.log")
	t.Setenv("FAKE_DOCKER_LOG", log)
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{Plugins: plugin.NewDefault(plugin.Config{Runtime: fakeDockerPath(t)})})
	sp := spec(7, "")
	sp.Plugin, sp.Container = "container", &api.ContainerSpec{Image: "alpine:3", Args: &[]string{"sleep", "600"}}
	grace := int64(2500)
	sp.KillGraceMs = &grace
	require.NoError(t, s.Start(sp))
	rec.await(t, 7, api.TaskStateRUNNING)
	pidfile := filepath.Join(filepath.Dir(log), "capstan-7.pid")
	require.Eventually(t, func() bool { _, err := os.Stat(pidfile); return err == nil }, waitFor, tick)

	killed, err := s.Abort(context.Background(), 7, workerapi.Aborted, "")
	require.NoError(t, err)
	require.True(t, killed)
	final := rec.await(t, 7, api.TaskStateKILLED)
	require.Len(t, *final.Cleanup, 2)
	require.NoFileExists(t, pidfile, "no container is left")
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.True(t, strings.HasPrefix(lines[0], "run --rm --name capstan-7 "), lines[0])
	require.Equal(t, []string{"stop -t 3 capstan-7", "rm -f capstan-7"}, lines[1:])
}

// flakyShell is the shell plugin whose Abort and Finalize fail their first
// tries.
type flakyShell struct {
	plugin.Shell
	aborts, finalizes atomic.Int32
}

func (f *flakyShell) Abort(ctx context.Context, t *plugin.Task) error {
	if f.aborts.Add(1) <= 2 {
		return errors.New("runtime busy")
	}
	return f.Shell.Abort(ctx, t)
}

func (f *flakyShell) Finalize(ctx context.Context, t *plugin.Task) error {
	if f.finalizes.Add(1) <= 1 {
		return errors.New("cannot clean up yet")
	}
	return f.Shell.Finalize(ctx, t)
}

// TestCleanupStepsAreRetriedUntilDone: handleAbortAndFinalize's steps are
// retried until they succeed; the final report keeps each step's last
// error.
func TestCleanupStepsAreRetriedUntilDone(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	flaky := &flakyShell{}
	s := newSupervisor(t, rec, supervisor.Config{Plugins: plugin.NewRegistry(map[string]plugin.Plugin{"shell": flaky})})
	require.NoError(t, s.Start(spec(8, "sleep 600")))
	pid := *rec.await(t, 8, api.TaskStateRUNNING).Pid
	killed, err := s.Abort(context.Background(), 8, workerapi.Aborted, "")
	require.NoError(t, err)
	require.True(t, killed)
	require.True(t, proctest.Gone(pid))
	final := rec.await(t, 8, api.TaskStateKILLED)
	cleanup := *final.Cleanup
	require.Equal(t, "runtime busy", *cleanup[0].Error)
	require.Equal(t, "cannot clean up yet", *cleanup[1].Error)
	require.EqualValues(t, 3, flaky.aborts.Load())
	require.EqualValues(t, 2, flaky.finalizes.Load())
}
