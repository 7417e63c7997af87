package e2e

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/kubetest"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

var bins Binaries

func TestMain(m *testing.M) {
	flag.Parse()
	root, err := RepoRoot()
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "capstan-e2e-bin")
	if err != nil {
		panic(err)
	}
	bins, err = Build(root, dir, benchmarking()) // tests run race builds, benchmarks release ones
	if err != nil {
		panic(err)
	}
	code := kubetest.Stopping(m).Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const project, domain = "e2e", "test"

func create(t *testing.T, s *Stack, spec api.WorkflowSpec) string {
	t.Helper()
	resp, err := s.Client.CreateRunWithResponse(context.Background(), project, domain, nil, api.CreateRunRequest{Spec: &spec})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON201, "create: %d %s", resp.StatusCode(), resp.Body)
	return resp.JSON201.Name
}

func getRun(t *testing.T, s *Stack, name string) *api.Run {
	t.Helper()
	resp, err := s.Client.GetRunWithResponse(context.Background(), project, domain, name)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "get: %d %s", resp.StatusCode(), resp.Body)
	return resp.JSON200
}

func waitPhase(t *testing.T, s *Stack, name string, timeout time.Duration, want api.Phase) *api.Run {
	t.Helper()
	var run *api.Run
	s.Eventually(timeout, "run "+name+" "+string(want), func() bool {
		run = getRun(t, s, name)
		require.False(t, run.EndedAt != nil && run.Phase != want, "run ended %s, want %s: %+v", run.Phase, want, run.Actions)
		return run.Phase == want
	})
	return run
}

func action(run *api.Run, name string) api.Action {
	for _, a := range run.Actions {
		if a.Name == name {
			return a
		}
	}
	return api.Action{}
}

func loadExample(t *testing.T, name string) api.WorkflowSpec {
	t.Helper()
	root, err := RepoRoot()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "examples", name))
	require.NoError(t, err)
	var spec api.WorkflowSpec
	require.NoError(t, yaml.UnmarshalStrict(raw, &spec))
	return spec
}

func logs(t *testing.T, s *Stack, run, act string, task, attempt int) string {
	t.Helper()
	resp, err := s.Client.GetAttemptLogsWithResponse(context.Background(), project, domain, run, act, task, attempt, nil)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "logs: %d %s", resp.StatusCode(), resp.Body)
	return resp.JSON200.Stdout
}

func ptr[T any](v T) *T { return &v }

// TestWalkingSkeleton runs the three acceptance scenarios on one stack.
func TestWalkingSkeleton(t *testing.T) {
	s := Start(t, bins, Options{})

	t.Run("DAG example succeeds with its result", func(t *testing.T) {
		name := create(t, s, loadExample(t, "stdlib-linecount.yaml"))
		run := waitPhase(t, s, name, 90*time.Second, api.PhaseSUCCEEDED)
		for _, step := range []string{"list", "count", "merge"} {
			require.Equal(t, api.PhaseSUCCEEDED, action(run, step).Phase, step)
		}
		require.Len(t, action(run, "count").Tasks, 4, "count runs 4 replicas")
		out := logs(t, s, name, "merge", 0, 1)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 10, "top 10 packages:\n%s", out)
		prev := int64(1 << 62)
		for _, l := range lines {
			f := strings.Fields(l)
			require.Len(t, f, 2, l)
			n, err := strconv.ParseInt(f[0], 10, 64)
			require.NoError(t, err)
			require.LessOrEqual(t, n, prev, "sorted by lines, descending")
			require.Greater(t, n, int64(1000), "a top-10 package of the standard library has over 1000 lines: %s", l)
			prev = n
		}
	})

	t.Run("failing step succeeds within its retry budget", func(t *testing.T) {
		name := create(t, s, api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{{
			Name: "flaky", Replicas: ptr(3), MaxRetriesFailure: ptr(1),
			Command: ptr(`f="$CAPSTAN_RUN_DIR/tried-$CAPSTAN_TASK_INDEX"; if [ ! -e "$f" ]; then touch "$f"; echo first try fails >&2; exit 3; fi; echo ok`),
		}}})
		run := waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
		require.Len(t, action(run, "flaky").Tasks, 3)
		for _, task := range action(run, "flaky").Tasks {
			require.Equal(t, api.TaskStateSUCCEEDED, task.State)
			require.Equal(t, 1, task.FailureCount, "one failure charged")
			require.Len(t, task.Attempts, 2)
			require.Equal(t, api.TaskStateFAILED, task.Attempts[0].State)
			require.Equal(t, 3, *task.Attempts[0].ExitCode)
			require.Equal(t, "user", *task.Attempts[0].Cause)
			require.Equal(t, api.TaskStateSUCCEEDED, task.Attempts[1].State)
		}
	})

	t.Run("failing step beyond its budget fails the run", func(t *testing.T) {
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{
			{Name: "fails", Command: ptr("exit 7"), MaxRetriesFailure: ptr(1)},
			{Name: "never", Command: ptr("echo unreachable")},
		}})
		run := waitPhase(t, s, name, 30*time.Second, api.PhaseFAILED)
		fails := action(run, "fails")
		require.Equal(t, api.PhaseFAILED, fails.Phase)
		require.Len(t, fails.Tasks[0].Attempts, 2, "1 try + 1 retry")
		require.Equal(t, 2, fails.Tasks[0].FailureCount)
		require.Equal(t, api.PhaseSKIPPED, action(run, "never").Phase)
	})

	t.Run("abort kills the running process within 5s", func(t *testing.T) {
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "sleeper",
			Command: ptr(bgHostPid("sleep 600", `"$CAPSTAN_RUN_DIR/sleep.pid"`) + " wait")}}})
		pidFile := filepath.Join(s.DataDir, "runs", project, domain, name, "sleep.pid")
		var pid int
		s.Eventually(30*time.Second, "sleep started", func() bool {
			b, err := os.ReadFile(pidFile)
			if err != nil || !strings.HasSuffix(string(b), "\n") {
				return false
			}
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil && !ProcessGone(pid)
		})
		resp, err := s.Client.AbortRunWithResponse(context.Background(), project, domain, name, api.AbortRequest{Reason: ptr("test abort")})
		require.NoError(t, err)
		require.NotNil(t, resp.JSON202, "abort: %d %s", resp.StatusCode(), resp.Body)
		abortedAt := time.Now()
		s.Eventually(5*time.Second, "sleep process gone", func() bool { return ProcessGone(pid) })
		run := getRun(t, s, name)
		require.Equal(t, api.PhaseABORTED, run.Phase)
		require.Equal(t, api.PhaseABORTED, action(run, "sleeper").Phase)
		t.Logf("abort to process gone: %s", time.Since(abortedAt))
		s.Eventually(5*time.Second, "abort delivered", func() bool {
			a := action(getRun(t, s, name), "a0")
			return a.Abort != nil && a.Abort.Outcome != nil && *a.Abort.Outcome == "delivered"
		})
		// The abort made the task KILLED; its attempt ends when the
		// executor's report of the kill arrives, which may follow the
		// delivery's outcome, and the task stays KILLED once it has.
		require.Equal(t, api.TaskStateKILLED, action(getRun(t, s, name), "sleeper").Tasks[0].State)
		s.Eventually(5*time.Second, "attempt reported KILLED", func() bool {
			return action(getRun(t, s, name), "sleeper").Tasks[0].Attempts[0].State == api.TaskStateKILLED
		})
		require.Equal(t, api.TaskStateKILLED, action(getRun(t, s, name), "sleeper").Tasks[0].State)

		again, err := s.Client.AbortRunWithResponse(context.Background(), project, domain, name, api.AbortRequest{})
		require.NoError(t, err)
		require.Equal(t, 409, again.StatusCode(), "aborting a terminal run is a conflict")
	})
}
