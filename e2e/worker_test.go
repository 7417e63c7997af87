package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// Worker liveness end to end (issue #5): a killed executor's tasks move to
// another, with nothing of it left running; a worker whose attempts keep
// getting lost is backed off and then replaced; SIGTERM drains.

// workerID waits for executor i's id file and returns the worker id it holds.
func workerID(tb testing.TB, s *Stack, i int) string {
	tb.Helper()
	var id string
	s.Eventually(30*time.Second, fmt.Sprintf("executor-%d registered", i), func() bool {
		b, err := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("executor-%d.id", i)))
		id = strings.TrimSpace(string(b))
		return err == nil && strings.HasSuffix(string(b), "\n") && workerByID(tb, s, id) != nil
	})
	return id
}

// workerByID returns the worker with id as GET /v1/workers shows it, or nil.
func workerByID(tb testing.TB, s *Stack, id string) *api.Worker {
	tb.Helper()
	resp, err := s.Client.ListWorkersWithResponse(context.Background())
	require.NoError(tb, err)
	require.NotNil(tb, resp.JSON200, "list workers: %d %s", resp.StatusCode(), resp.Body)
	for _, w := range resp.JSON200.Workers {
		if w.Id == id {
			return &w
		}
	}
	return nil
}

func submitRun(tb testing.TB, s *Stack, spec api.WorkflowSpec) string {
	tb.Helper()
	resp, err := s.Client.CreateRunWithResponse(context.Background(), project, domain, nil, api.CreateRunRequest{Spec: &spec})
	require.NoError(tb, err)
	require.NotNil(tb, resp.JSON201, "create: %d %s", resp.StatusCode(), resp.Body)
	return resp.JSON201.Name
}

// stepTasks returns the tasks of step act of run name.
func stepTasks(tb testing.TB, s *Stack, name, act string) []api.Task {
	tb.Helper()
	resp, err := s.Client.GetRunWithResponse(context.Background(), project, domain, name)
	require.NoError(tb, err)
	require.NotNil(tb, resp.JSON200, "get: %d %s", resp.StatusCode(), resp.Body)
	for _, a := range resp.JSON200.Actions {
		if a.Name == act {
			return a.Tasks
		}
	}
	return nil
}

// allRunningOn reports whether there are n tasks, all RUNNING on worker id.
func allRunningOn(tasks []api.Task, n int, id string) bool {
	if len(tasks) != n {
		return false
	}
	for _, t := range tasks {
		if t.State != api.TaskStateRUNNING || t.WorkerId == nil || *t.WorkerId != id {
			return false
		}
	}
	return true
}

// pidsCommand records, for each attempt, the shell's host pid and a
// background grandchild's in the run directory, then sleeps for secs.
func pidsCommand(secs int) *string {
	return ptr(fmt.Sprintf(`f="$CAPSTAN_RUN_DIR/pids.$CAPSTAN_TASK_INDEX.$CAPSTAN_ATTEMPT"; `+
		hostPidTo(`"$f.sh"`)+`; `+bgHostPid("sleep 600", `"$f.bg"`)+
		` while [ ! -s "$f.bg" ]; do sleep 0.01; done; echo "$(cat "$f.sh") $(cat "$f.bg")" > "$f.tmp" && mv "$f.tmp" "$f"; sleep %d`, secs))
}

// attemptPids returns, for attempt 1 of each of n tasks, the pids of its
// shell, its background grandchild and its process group (the shim).
func attemptPids(tb testing.TB, dir string, n int) []int {
	tb.Helper()
	var pids []int
	for i := range n {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pids.%d.1", i)))
		require.NoError(tb, err)
		f := strings.Fields(string(b))
		require.Len(tb, f, 2)
		for _, v := range f {
			pid, err := strconv.Atoi(v)
			require.NoError(tb, err)
			pids = append(pids, pid)
		}
		pgid, err := syscall.Getpgid(pids[len(pids)-2])
		require.NoError(tb, err, "the shell of task %d runs", i)
		pids = append(pids, pgid)
	}
	return pids
}

// killRecovery is one trial of the dead-worker recovery: executor victim
// holds n fresh `sleep` tasks while executor spare starts idle; victim is
// killed with SIGKILL. It returns how long until every task RUNNING on the
// spare, and checks that the move charged the preemption budget only and
// that no process of the victim's attempts survived. It leaves the run
// aborted and the spare idle.
func killRecovery(tb testing.TB, s *Stack, victim, spare, n int) time.Duration {
	tb.Helper()
	victimID := workerID(tb, s, victim)
	name := submitRun(tb, s, api.WorkflowSpec{Steps: []api.Step{{Name: "sleepers", Replicas: ptr(n), Command: pidsCommand(30)}}})
	waitOrExplain(tb, s, name, "sleepers", 30*time.Second, "every task running on the victim", func() bool {
		return allRunningOn(stepTasks(tb, s, name, "sleepers"), n, victimID)
	})
	dir := filepath.Join(s.DataDir, "runs", project, domain, name)
	s.Eventually(10*time.Second, "every attempt recorded its pids", func() bool {
		entries, _ := filepath.Glob(filepath.Join(dir, "pids.*.1"))
		return len(entries) == n
	})
	pids := attemptPids(tb, dir, n)
	s.StartExecutor(spare)
	spareID := workerID(tb, s, spare)

	s.Kill(fmt.Sprintf("executor-%d", victim))
	killed := time.Now()
	var elapsed time.Duration
	deadline := killed.Add(30 * time.Second)
	for !allRunningOn(stepTasks(tb, s, name, "sleepers"), n, spareID) {
		if time.Now().After(deadline) {
			explain(tb, s, name, "sleepers")
			tb.Fatalf("tasks not running on the spare %s 30s after the kill of %s", spareID, victimID)
		}
		<-time.After(10 * time.Millisecond) // the polling interval
	}
	elapsed = time.Since(killed)

	for _, t := range stepTasks(tb, s, name, "sleepers") {
		require.Equal(tb, 1, t.PreemptionCount, "task %d: the lost attempt charges the preemption budget", t.Index)
		require.Zero(tb, t.FailureCount, "task %d: never the failure budget", t.Index)
		require.Equal(tb, api.TaskStateWORKERFAILED, t.Attempts[0].State)
		require.Equal(tb, "worker_lost", *t.Attempts[0].Cause)
	}
	s.Eventually(5*time.Second, "no process of the killed executor's attempts", func() bool {
		for _, pid := range pids {
			if !ProcessGone(pid) {
				return false
			}
		}
		return true
	})
	stopRun(tb, s, name)
	s.Eventually(30*time.Second, "the spare is idle", func() bool {
		w := workerByID(tb, s, spareID)
		return w != nil && w.FreeSlots != nil && *w.FreeSlots == w.Slots
	})
	return elapsed
}

// waitOrExplain polls cond like Stack.Eventually, explaining a timeout.
func waitOrExplain(tb testing.TB, s *Stack, name, act string, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			explain(tb, s, name, act)
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-time.After(20 * time.Millisecond) // the polling interval
	}
}

// explain logs the tasks of a step, the workers and what the scheduler
// logged besides asynq's chatter, to say why a wait timed out.
func explain(tb testing.TB, s *Stack, name, act string) {
	tb.Helper()
	for _, t := range stepTasks(tb, s, name, act) {
		tb.Logf("task %d: %s on %v, pending_reason %v, attempts %d", t.Index, t.State, deref(t.WorkerId),
			deref(t.PendingReason), len(t.Attempts))
	}
	resp, err := s.Client.ListWorkersWithResponse(context.Background())
	if err == nil && resp.JSON200 != nil {
		for _, w := range resp.JSON200.Workers {
			tb.Logf("worker %s %s: %s draining=%v failures=%d free=%v heartbeat=%s", w.Name, w.Id, w.State, w.Draining,
				len(w.Failures), deref(w.FreeSlots), w.LastHeartbeatAt.Format(time.RFC3339Nano))
		}
	}
	s.mu.Lock()
	procs := []*Proc{s.procs["scheduler"], s.procs["api"]}
	s.mu.Unlock()
	for _, p := range procs {
		b, _ := os.ReadFile(p.Log)
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, `"msg":"asynq"`) && !strings.Contains(line, "DEBUG") && line != "" {
				tb.Log(line)
			}
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func stopRun(tb testing.TB, s *Stack, name string) {
	tb.Helper()
	resp, err := s.Client.AbortRunWithResponse(context.Background(), project, domain, name, api.AbortRequest{})
	require.NoError(tb, err)
	require.NotNil(tb, resp.JSON202, "abort: %d %s", resp.StatusCode(), resp.Body)
}

// livenessEnv are the settings of the liveness tests' stacks.
var livenessEnv = []string{"CAPSTAN_EXECUTOR_SLOTS=10", "CAPSTAN_SHUTDOWN_TIMEOUT=5s"}

func TestKilledExecutorsTasksMoveToTheIdleOne(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 1, Env: livenessEnv})
	victimID := workerID(t, s, 1)
	elapsed := killRecovery(t, s, 1, 2, 10)
	t.Logf("10 tasks running on the other executor %s after kill -9", elapsed)

	w := workerByID(t, s, victimID)
	require.NotNil(t, w)
	require.Equal(t, api.WorkerStateDead, w.State)
	require.Len(t, w.Failures, 10, "the lost attempts are recorded on the dead worker")
}

// TestLostAttemptsBackOffThenReplaceTheWorker: each attempt the worker loses
// joins its failures; before new work it waits table[n] after the last
// (ARC's failedRunnerBackoff, shrunk); the 6th deletes it and the executor
// registers again under a new identity with no failures.
func TestLostAttemptsBackOffThenReplaceTheWorker(t *testing.T) {
	t.Parallel()
	table := []time.Duration{0, 400 * time.Millisecond, 800 * time.Millisecond, 1200 * time.Millisecond,
		1600 * time.Millisecond, 2 * time.Second}
	s := Start(t, bins, Options{Executors: 1, Env: append([]string{
		"CAPSTAN_WORKER_BACKOFF_TABLE=0s,400ms,800ms,1200ms,1600ms,2s"}, livenessEnv...)})
	first := workerID(t, s, 1)
	address := workerByID(t, s, first).Address
	name := submitRun(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "lost", Command: ptr("sleep 600")}}})

	for n := 1; n <= len(table); n++ {
		var attempt api.Attempt
		s.Eventually(30*time.Second, fmt.Sprintf("attempt %d running", n), func() bool {
			tasks := stepTasks(t, s, name, "lost")
			if len(tasks) == 0 || len(tasks[0].Attempts) != n {
				return false
			}
			attempt = tasks[0].Attempts[n-1]
			return attempt.State == api.TaskStateRUNNING
		})
		require.Equal(t, first, *attempt.WorkerId)
		loseAttempt(t, s, first, address, attempt.Id)
		if n == len(table) {
			break
		}
		s.Eventually(10*time.Second, fmt.Sprintf("failure %d recorded", n), func() bool {
			w := workerByID(t, s, first)
			return w != nil && len(w.Failures) == n && w.PlaceableAfter != nil
		})
	}

	task := stepTasks(t, s, name, "lost")[0]
	for n := 1; n < len(table); n++ {
		lost, next := task.Attempts[n-1], task.Attempts[n]
		require.Equal(t, api.TaskStateWORKERFAILED, lost.State)
		gap := next.CreatedAt.Sub(*lost.FinishedAt)
		require.GreaterOrEqual(t, gap, table[n]-50*time.Millisecond,
			"after failure %d the worker waits failedRunnerBackoff[%d] = %s before new work", n, n, table[n])
		t.Logf("failure %d: next attempt placed %s later (table: %s)", n, gap.Round(time.Millisecond), table[n])
	}

	s.Eventually(15*time.Second, "the worker deleted and its executor registered again", func() bool {
		return workerByID(t, s, first) == nil && workerID(t, s, 1) != first
	})
	second := workerID(t, s, 1)
	w := workerByID(t, s, second)
	require.Empty(t, w.Failures, "a new identity starts with an empty map")
	s.Eventually(30*time.Second, "the task runs on the new identity", func() bool {
		task := stepTasks(t, s, name, "lost")[0]
		last := task.Attempts[len(task.Attempts)-1]
		return task.State == api.TaskStateRUNNING && last.WorkerId != nil && *last.WorkerId == second
	})
	task = stepTasks(t, s, name, "lost")[0]
	require.Equal(t, len(table), task.PreemptionCount)
	require.Zero(t, task.FailureCount)
}

// loseAttempt makes the executor of worker at address drop attempt id as
// if its worker lost it: it is killed and reported WORKER_FAILED.
func loseAttempt(t *testing.T, s *Stack, worker, address string, id int64) {
	t.Helper()
	body := bytes.NewBufferString(`{"cause": "worker_lost", "reason": "test: the worker lost it"}`)
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/attempts/%d/abort", address, id), body)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.ExecutorCredential(worker))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestSIGTERMDrainsTheExecutor: a short task on a SIGTERMed executor
// finishes SUCCEEDED there, nothing new is placed on it meanwhile, and it
// deregisters before it exits.
func TestSIGTERMDrainsTheExecutor(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 1, Env: append([]string{"CAPSTAN_DRAIN_TIMEOUT=30s"}, livenessEnv...)})
	leaving := workerID(t, s, 1)
	short := submitRun(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "short", Command: ptr("sleep 3; echo done")}}})
	s.Eventually(30*time.Second, "the short task running", func() bool {
		return allRunningOn(stepTasks(t, s, short, "short"), 1, leaving)
	})

	s.mu.Lock()
	proc := s.procs["executor-1"]
	s.mu.Unlock()
	require.NoError(t, proc.Cmd.Process.Signal(syscall.SIGTERM))
	s.Eventually(10*time.Second, "the worker draining", func() bool {
		w := workerByID(t, s, leaving)
		return w != nil && w.Draining
	})
	s.StartExecutor(2)
	other := workerID(t, s, 2)
	later := submitRun(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "later", Command: ptr("echo later")}}})

	run := waitPhase(t, s, short, 30*time.Second, api.PhaseSUCCEEDED)
	task := action(run, "short").Tasks[0]
	require.Len(t, task.Attempts, 1, "finished where it ran, not retried")
	require.Equal(t, leaving, *task.Attempts[0].WorkerId)
	require.Equal(t, "done\n", logs(t, s, short, "short", 0, 1))
	run = waitPhase(t, s, later, 30*time.Second, api.PhaseSUCCEEDED)
	require.Equal(t, other, *action(run, "later").Tasks[0].WorkerId, "no new work on a draining executor")

	s.Eventually(20*time.Second, "the executor exited", func() bool { return !proc.Alive() })
	require.Nil(t, workerByID(t, s, leaving), "it deregistered")
}

// TestHeartbeatStopsWhatAnAbortDidNotReach: with the abort reconciler down,
// an abort's message is never delivered, yet the executor's next heartbeat
// learns the attempt must stop and kills it (a lost message heals on the
// next beat).
func TestHeartbeatStopsWhatAnAbortDidNotReach(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 1, Env: livenessEnv})
	s.Kill("abort-reconciler")
	name := submitRun(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "s", Command: pidsCommand(600)}}})
	id := workerID(t, s, 1)
	s.Eventually(30*time.Second, "the task running", func() bool { return allRunningOn(stepTasks(t, s, name, "s"), 1, id) })
	dir := filepath.Join(s.DataDir, "runs", project, domain, name)
	s.Eventually(10*time.Second, "pids recorded", func() bool {
		_, err := os.Stat(filepath.Join(dir, "pids.0.1"))
		return err == nil
	})
	pids := attemptPids(t, dir, 1)

	stopRun(t, s, name)
	s.Eventually(5*time.Second, "the attempt's processes gone", func() bool {
		for _, pid := range pids {
			if !ProcessGone(pid) {
				return false
			}
		}
		return true
	})
	s.Eventually(5*time.Second, "the attempt reported KILLED", func() bool {
		a := stepTasks(t, s, name, "s")[0].Attempts[0]
		return a.State == api.TaskStateKILLED && a.Cause != nil && *a.Cause == "aborted"
	})
}

// TestExecutorBackFromTheDeadKillsWhatItRuns: an executor frozen past its
// grace is declared dead and its tasks move on; when it wakes its heartbeat
// is refused, so it kills what it still runs and registers again under a
// new identity, and the moved tasks carry on undisturbed.
func TestExecutorBackFromTheDeadKillsWhatItRuns(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 1, Env: livenessEnv})
	frozen := workerID(t, s, 1)
	name := submitRun(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "s", Replicas: ptr(2), Command: pidsCommand(600)}}})
	s.Eventually(30*time.Second, "the tasks running", func() bool { return allRunningOn(stepTasks(t, s, name, "s"), 2, frozen) })
	dir := filepath.Join(s.DataDir, "runs", project, domain, name)
	s.Eventually(10*time.Second, "pids recorded", func() bool {
		entries, _ := filepath.Glob(filepath.Join(dir, "pids.*.1"))
		return len(entries) == 2
	})
	pids := attemptPids(t, dir, 2)
	s.StartExecutor(2)
	other := workerID(t, s, 2)

	s.mu.Lock()
	proc := s.procs["executor-1"]
	s.mu.Unlock()
	require.NoError(t, proc.Cmd.Process.Signal(syscall.SIGSTOP))
	s.Eventually(20*time.Second, "the tasks running on the other executor", func() bool {
		return allRunningOn(stepTasks(t, s, name, "s"), 2, other)
	})
	require.Equal(t, api.WorkerStateDead, workerByID(t, s, frozen).State)

	require.NoError(t, proc.Cmd.Process.Signal(syscall.SIGCONT))
	s.Eventually(10*time.Second, "the woken executor's attempts killed", func() bool {
		for _, pid := range pids {
			if !ProcessGone(pid) {
				return false
			}
		}
		return true
	})
	s.Eventually(10*time.Second, "the woken executor registered again", func() bool { return workerID(t, s, 1) != frozen })
	require.Equal(t, api.WorkerStateAlive, workerByID(t, s, workerID(t, s, 1)).State)
	for _, task := range stepTasks(t, s, name, "s") {
		require.Equal(t, api.TaskStateRUNNING, task.State)
		require.Equal(t, other, *task.WorkerId)
		require.Len(t, task.Attempts, 2)
		require.Equal(t, 1, task.PreemptionCount)
	}
}
