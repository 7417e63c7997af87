package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// pidIn waits until the file holds the pid of a live process and returns it.
func pidIn(t *testing.T, s *Stack, path string) int {
	t.Helper()
	var pid int
	s.Eventually(30*time.Second, "pid in "+filepath.Base(path), func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && !ProcessGone(pid)
	})
	return pid
}

func runDir(s *Stack, run string) string {
	return filepath.Join(s.DataDir, "runs", project, domain, run)
}

// sleeper starts `sleep 600` in the background, records its host pid in
// file, and waits for it.
func sleeper(file string) *string {
	return ptr(bgHostPid("sleep 600", `"$CAPSTAN_RUN_DIR/`+file+`"`) + " wait")
}

// TestTaskLifecycle covers Iris's task rules end to end on one stack of two
// executors: scheduling deadlines, gangs and timeouts.
func TestTaskLifecycle(t *testing.T) {
	s := Start(t, bins, Options{})

	t.Run("impossible constraints wait with a reason, then UNSCHEDULABLE", func(t *testing.T) {
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "gpu", Command: ptr("true"), Replicas: ptr(2),
			SchedulingTimeout: ptr("3s"), Constraints: &[]api.Constraint{{Key: "gpu", Op: "EXISTS"}}}}})
		s.Eventually(10*time.Second, "pending_reason", func() bool {
			a := action(getRun(t, s, name), "gpu")
			return len(a.Tasks) == 2 && a.Tasks[0].PendingReason != nil &&
				*a.Tasks[0].PendingReason == "no worker matches constraint gpu=EXISTS" &&
				a.Phase == api.PhaseWAITINGFORRESOURCES
		})
		run := waitPhase(t, s, name, 15*time.Second, api.PhaseUNSCHEDULABLE)
		for _, task := range action(run, "gpu").Tasks {
			require.Equal(t, api.TaskStateUNSCHEDULABLE, task.State)
			require.Empty(t, task.Attempts, "never placed")
		}
	})

	t.Run("a coscheduled task failing terminally leaves no running sibling", func(t *testing.T) {
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "gang", Replicas: ptr(2), Coscheduled: ptr(true),
			Command: ptr(`if [ "$CAPSTAN_TASK_INDEX" = 0 ]; then
				while [ ! -s "$CAPSTAN_RUN_DIR/sibling.pid" ]; do sleep 0.05; done; exit 9
			fi
			` + bgHostPid("sleep 600", `"$CAPSTAN_RUN_DIR/sibling.pid"`) + ` wait`)}}})
		pid := pidIn(t, s, filepath.Join(runDir(s, name), "sibling.pid"))
		run := waitPhase(t, s, name, 20*time.Second, api.PhaseFAILED)
		s.Eventually(5*time.Second, "sibling process gone", func() bool { return ProcessGone(pid) })
		tasks := action(run, "gang").Tasks
		require.Equal(t, api.TaskStateFAILED, tasks[0].State)
		require.Equal(t, api.TaskStateWORKERFAILED, tasks[1].State, "the sibling's budget is exhausted")
		require.Greater(t, tasks[1].PreemptionCount, tasks[1].MaxRetriesPreemption)
	})

	t.Run("a task past its timeout is KILLED and the step TIMED_OUT", func(t *testing.T) {
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "slow", Timeout: ptr("2s"), Command: sleeper("slow.pid")}}})
		pid := pidIn(t, s, filepath.Join(runDir(s, name), "slow.pid"))
		run := waitPhase(t, s, name, 15*time.Second, api.PhaseTIMEDOUT)
		s.Eventually(5*time.Second, "timed-out process gone", func() bool { return ProcessGone(pid) })
		task := action(run, "slow").Tasks[0]
		require.Equal(t, api.TaskStateKILLED, task.State)
		require.Equal(t, api.PhaseTIMEDOUT, action(run, "slow").Phase)
	})
}

// TestPreemption runs a batch job on the only slot of the only worker, then
// an interactive job that must evict it.
func TestPreemption(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1, Env: []string{"CAPSTAN_EXECUTOR_SLOTS=1"}})
	victim := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "bulk", Priority: ptr("batch"), Command: sleeper("bulk.pid")}}})
	pid := pidIn(t, s, filepath.Join(runDir(s, victim), "bulk.pid"))

	urgent := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "urgent", Command: ptr("echo urgent")}}})
	waitPhase(t, s, urgent, 20*time.Second, api.PhaseSUCCEEDED)
	s.Eventually(5*time.Second, "victim process gone", func() bool { return ProcessGone(pid) })

	task := action(getRun(t, s, victim), "bulk").Tasks[0]
	require.Equal(t, api.TaskStatePREEMPTED, task.Attempts[0].State)
	require.Equal(t, "preempted", *task.Attempts[0].Cause)
	require.Equal(t, 1, task.PreemptionCount, "a started victim is charged")
	require.Equal(t, 0, task.FailureCount)
	// The victim is requeued and runs again once the slot is free.
	s.Eventually(20*time.Second, "victim requeued and running again", func() bool {
		task = action(getRun(t, s, victim), "bulk").Tasks[0]
		return len(task.Attempts) == 2 && task.State == api.TaskStateRUNNING
	})
}
