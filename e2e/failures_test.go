package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// fastWorkerBackoff keeps ARC's worker failure backoff from spacing out a
// test's system failures (each counts against its worker).
var fastWorkerBackoff = []string{"CAPSTAN_WORKER_BACKOFF_TABLE=0s,100ms,100ms,100ms,100ms,100ms,100ms,100ms"}

// TestSystemFailures: a program that does not exist is a system failure
// (Flyte's executor: a platform error, not the user's), retried in place on
// the same task up to max_system_failures (3) without charging
// failure_count; the 4th fails the task for good with the code
// MaxSystemFailuresExceeded, shown on the attempt and as the step's reason.
func TestSystemFailures(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Env: fastWorkerBackoff})
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{
		{Name: "missing", Args: &[]string{"/no/such/binary"}},
		{Name: "never", Command: ptr("echo unreachable")},
	}})
	run := waitPhase(t, s, name, 60*time.Second, api.PhaseFAILED)
	step := action(run, "missing")
	require.Equal(t, api.PhaseFAILED, step.Phase)
	require.Equal(t, "MaxSystemFailuresExceeded", *step.Reason, "the step says why it failed")
	require.Len(t, step.Tasks, 1, "retried in place: one task")
	task := step.Tasks[0]
	require.Equal(t, api.TaskStateFAILED, task.State)
	require.Equal(t, 0, task.FailureCount, "system failures never charge the user's budget")
	require.Equal(t, 4, *task.SystemFailureCount)
	require.Equal(t, 3, *task.MaxSystemFailures)
	require.Len(t, task.Attempts, 4, "3 system failures retried, the 4th permanent")
	for i, a := range task.Attempts {
		require.Equal(t, api.TaskStateFAILED, a.State, "attempt %d", a.Number)
		require.Equal(t, "system", *a.Cause, "attempt %d: %v", a.Number, a.Error)
		if i < 3 {
			require.False(t, a.Code != nil && *a.Code == "MaxSystemFailuresExceeded", "attempt %d was retried", a.Number)
		}
	}
	require.Equal(t, "MaxSystemFailuresExceeded", *task.Attempts[3].Code)
	require.Equal(t, api.PhaseSKIPPED, action(run, "never").Phase)
}

// TestContainerUnplaceable: no executor runs the container plugin (none
// advertises plugin.container=true), so a container step waits
// WAITING_FOR_RESOURCES with its reason until its scheduling_timeout, then
// ends UNSCHEDULABLE — never a hang or a silent failure.
func TestContainerUnplaceable(t *testing.T) {
	t.Parallel()
	noRuntime := t.TempDir() // executors find no docker or podman on their PATH
	require.NoError(t, os.Symlink("/bin/sh", filepath.Join(noRuntime, "sh")))
	s := Start(t, bins, Options{Executors: 1, ExecutorEnv: func(int) []string { return []string{"PATH=" + noRuntime} }})
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "boxed", Plugin: ptr("container"),
		Container: &api.ContainerSpec{Image: "alpine:3", Args: &[]string{"true"}}, SchedulingTimeout: ptr("3s")}}})
	const reason = "no worker runs plugin container"
	waitRun(t, s, name, 10*time.Second, "boxed waits for a worker", func(r *api.Run) bool {
		a := action(r, "boxed")
		require.NotEqual(t, api.PhaseUNSCHEDULABLE, a.Phase, "ended before its wait was seen")
		return a.Phase == api.PhaseWAITINGFORRESOURCES && len(a.Tasks) == 1 && a.Tasks[0].PendingReason != nil &&
			*a.Tasks[0].PendingReason == reason
	})
	run := waitPhase(t, s, name, 30*time.Second, api.PhaseUNSCHEDULABLE)
	boxed := action(run, "boxed")
	require.Equal(t, api.PhaseUNSCHEDULABLE, boxed.Phase)
	require.Equal(t, api.TaskStateUNSCHEDULABLE, boxed.Tasks[0].State)
	require.Empty(t, boxed.Tasks[0].Attempts, "it never ran")
	require.GreaterOrEqual(t, boxed.EndedAt.Sub(*boxed.StartedAt), 3*time.Second, "it waited its scheduling_timeout")
}
