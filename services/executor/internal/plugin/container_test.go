package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/stretchr/testify/require"
)

func containerTask(t *testing.T, id int64, c domain.ContainerSpec) *plugin.Task {
	t.Helper()
	work, run := t.TempDir(), t.TempDir()
	outputs := filepath.Join(work, "outputs")
	require.NoError(t, os.Mkdir(outputs, 0o755))
	return &plugin.Task{ID: id, Spec: domain.PluginSpec{Plugin: domain.PluginContainer, Container: &c},
		Dir: work, Mounts: []string{work, run}, RuntimeEnv: os.Environ(), OutputsDir: outputs,
		AttemptEnv: []string{"GREETING=hi", "CAPSTAN_OUTPUTS_DIR=" + outputs},
		KillGrace:  3 * time.Second, LogLimit: 64 << 10}
}

// TestContainerCommandLine checks the runtime's command line: --rm, the
// name and label of the attempt, the work and run directories mounted at
// the same paths, the work directory as working directory, the attempt's
// env then the container's (whose CAPSTAN_* may not override the
// attempt's), the image and its args; the outputs directory works inside.
func TestContainerCommandLine(t *testing.T) {
	rt, log := fakeDocker(t)
	task := containerTask(t, 7, domain.ContainerSpec{Image: "alpine:3", Env: map[string]string{"B": "2", "CAPSTAN_OUTPUTS_DIR": "/x"},
		Args: []string{"sh", "-c", `echo "$GREETING $B" > "$CAPSTAN_OUTPUTS_DIR/msg"; echo out`}})
	c := &plugin.Container{Runtime: rt}

	tr, err := c.Handle(context.Background(), task)
	require.NoError(t, err)
	require.Equal(t, plugin.PhaseRunning, tr.Phase)
	require.Positive(t, tr.Pid)
	tr, err = until(t, c, task)
	require.NoError(t, err)
	require.Equal(t, plugin.PhaseSuccess, tr.Phase)
	require.Equal(t, "out\n", string(tr.Stdout))
	require.Equal(t, 0, *tr.ExitCode)
	msg, err := os.ReadFile(filepath.Join(task.OutputsDir, "msg"))
	require.NoError(t, err)
	require.Equal(t, "hi 2\n", string(msg))
	require.NoError(t, c.Finalize(context.Background(), task))

	require.Equal(t, []string{
		"run --rm --name capstan-7 --label capstan.attempt=7 --label capstan.managed=true" +
			" --cap-drop=ALL --security-opt=no-new-privileges" +
			" -v " + task.Mounts[0] + ":" + task.Mounts[0] + " -v " + task.Mounts[1] + ":" + task.Mounts[1] +
			" -w " + task.Dir + " -e GREETING=hi -e CAPSTAN_OUTPUTS_DIR=" + task.OutputsDir + " -e B=2" +
			" alpine:3 sh -c echo \"$GREETING $B\" > \"$CAPSTAN_OUTPUTS_DIR/msg\"; echo out",
		"rm -f capstan-7",
	}, calls(t, log))
}

// TestContainerAbortStopsThenFinalizeRemoves: Abort is `stop -t <grace
// seconds>` (the runtime's own SIGTERM, grace, SIGKILL), and the CLI's
// process group is gone; Finalize is `rm -f`, and "no such container" is
// no error, so a second Finalize succeeds too.
func TestContainerAbortStopsThenFinalizeRemoves(t *testing.T) {
	rt, log := fakeDocker(t)
	task := containerTask(t, 8, domain.ContainerSpec{Image: "alpine:3", Args: []string{"sleep", "600"}})
	c := &plugin.Container{Runtime: rt}
	tr, err := c.Handle(context.Background(), task)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(calls(t, log)) == 1 }, waitFor, tick)
	pidfile := filepath.Join(filepath.Dir(log), "capstan-8.pid")
	require.Eventually(t, func() bool { _, err := os.Stat(pidfile); return err == nil }, waitFor, tick)

	require.NoError(t, c.Abort(context.Background(), task))
	require.Eventually(t, func() bool { return proctest.Gone(tr.Pid) }, waitFor, tick)
	tr, err = until(t, c, task)
	require.NoError(t, err)
	require.Equal(t, plugin.PhaseRetryableFailure, tr.Phase, "killed by the stop's SIGTERM")
	require.NoError(t, c.Finalize(context.Background(), task))
	require.NoFileExists(t, pidfile, "no container is left")
	require.NoError(t, c.Finalize(context.Background(), task), "removing a removed container is done")

	got := calls(t, log)
	require.Equal(t, []string{"stop -t 3 capstan-8", "rm -f capstan-8", "rm -f capstan-8"}, got[1:])
}

// TestContainerRuntimeFailureIsSystem: exit status 125 is the runtime's
// failure before the container started, "not the fault of the user's
// code": a system failure with code ContainerRuntimeError; a runtime that
// cannot be executed is one too.
func TestContainerRuntimeFailureIsSystem(t *testing.T) {
	rt, _ := fakeDocker(t)
	task := containerTask(t, 9, domain.ContainerSpec{Image: "capstan.test/runtime-fails"})
	c := &plugin.Container{Runtime: rt}
	_, err := c.Handle(context.Background(), task)
	require.NoError(t, err)
	_, err = until(t, c, task)
	var se *plugin.SystemError
	require.ErrorAs(t, err, &se)
	require.Equal(t, plugin.CodeContainerRuntimeError, plugin.SystemCode(err))
	require.Contains(t, err.Error(), "runtime failed")

	missing := &plugin.Container{Runtime: filepath.Join(t.TempDir(), "docker")}
	_, err = missing.Handle(context.Background(), containerTask(t, 10, domain.ContainerSpec{Image: "alpine:3"}))
	require.Equal(t, plugin.CodeContainerRuntimeError, plugin.SystemCode(err))
}

// TestDetectRuntime: auto takes the first runtime whose `version` answers;
// a named runtime that does not answer is an error; none finds none.
func TestDetectRuntime(t *testing.T) {
	_, log := fakeDocker(t)
	t.Setenv("PATH", filepath.Join(must(filepath.Abs("testdata/fakedocker")))+":"+os.Getenv("PATH"))
	ctx := context.Background()
	rt, err := plugin.DetectRuntime(ctx, plugin.RuntimeAuto, time.Second)
	require.NoError(t, err)
	require.Equal(t, "docker", rt)
	rt, err = plugin.DetectRuntime(ctx, plugin.RuntimeNone, time.Second)
	require.NoError(t, err)
	require.Empty(t, rt)
	_, err = plugin.DetectRuntime(ctx, "rkt", time.Second)
	require.Error(t, err)

	t.Setenv("FAKE_DOCKER_BROKEN", "1")
	rt, err = plugin.DetectRuntime(ctx, plugin.RuntimeAuto, time.Second)
	require.NoError(t, err)
	require.Empty(t, rt, "a runtime whose daemon does not answer is no runtime")
	_, err = plugin.DetectRuntime(ctx, plugin.RuntimePodman, time.Second)
	require.ErrorContains(t, err, "Cannot connect")
	require.Equal(t, []string{"version", "version", "version", "version"}, calls(t, log))
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// TestContainerConfinement checks the run flags that confine a sandboxed
// attempt's container: no capability, no new privileges, the attempt's
// user and its run's group, its process, memory and CPU limits, and no
// network for a network: none step; a step without them gets none of the
// limits.
func TestContainerConfinement(t *testing.T) {
	t.Parallel()
	task := containerTask(t, 9, domain.ContainerSpec{Image: "alpine:3", Args: []string{"true"}})
	task.AttemptEnv = nil
	task.RunAs = &runner.Credential{UID: 100007, GID: 100007, Groups: []uint32{165540}}
	task.MaxProcs, task.Network = 4096, domain.NetworkNone
	task.Resources = domain.Resources{CPUMillis: 1500, MemoryBytes: 256 << 20}
	c := &plugin.Container{Runtime: "docker"}
	require.Equal(t, []string{"docker", "run", "--rm", "--name", "capstan-9", "--label", "capstan.attempt=9",
		"--label", "capstan.managed=true",
		"--cap-drop=ALL", "--security-opt=no-new-privileges", "--user=100007:100007", "--group-add=165540",
		"--pids-limit=4096", "--memory=268435456", "--cpus=1.5", "--network=none",
		"-v", task.Mounts[0] + ":" + task.Mounts[0], "-v", task.Mounts[1] + ":" + task.Mounts[1], "-w", task.Dir,
		"alpine:3", "true"}, c.RunArgs(task))

	task.MaxProcs, task.Network, task.Resources = 0, "", domain.Resources{}
	args := strings.Join(c.RunArgs(task), " ")
	for _, flag := range []string{"--pids-limit", "--memory", "--cpus", "--network"} {
		require.NotContains(t, args, flag)
	}
}
