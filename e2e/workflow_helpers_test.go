package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// workflowEnv shrinks KubeVela's retry-then-suspend for the workflow tests:
// a failed on_failure: suspend step is retried twice, 1 s apart (the
// backoff's floor), before its run pauses.
var workflowEnv = []string{"CAPSTAN_WORKFLOW_MAX_STEP_RETRIES=2", "CAPSTAN_WORKFLOW_MAX_FAILED_BACKOFF=1s"}

// waitRun polls run name until cond holds and returns the run it held for.
func waitRun(t *testing.T, s *Stack, name string, timeout time.Duration, what string, cond func(*api.Run) bool) *api.Run {
	t.Helper()
	var run *api.Run
	s.Eventually(timeout, "run "+name+": "+what, func() bool {
		run = getRun(t, s, name)
		return cond(run)
	})
	return run
}

// waitStep waits until step reaches phase and returns the run then.
func waitStep(t *testing.T, s *Stack, name, step string, timeout time.Duration, want api.Phase) *api.Run {
	t.Helper()
	return waitRun(t, s, name, timeout, step+" "+string(want), func(r *api.Run) bool {
		require.False(t, r.EndedAt != nil && action(r, step).Phase != want,
			"run ended %s with %s %s, want %s", r.Phase, step, action(r, step).Phase, want)
		return action(r, step).Phase == want
	})
}

// resumeRun posts a resume and requires its 202.
func resumeRun(t *testing.T, s *Stack, name string) {
	t.Helper()
	resp, err := s.Client.ResumeRunWithResponse(context.Background(), project, domain, name, api.RunSignalRequest{})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON202, "resume: %d %s", resp.StatusCode(), resp.Body)
}

// restartRun posts a restart from step from and requires its 202.
func restartRun(t *testing.T, s *Stack, name, from string) {
	t.Helper()
	resp, err := s.Client.RestartRunWithResponse(context.Background(), project, domain, name, api.RestartRequest{FromStep: &from})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON202, "restart: %d %s", resp.StatusCode(), resp.Body)
}

// decide approves (or rejects) approval step step of run name; it returns
// the status code and the problem's code for a refusal.
func decide(t *testing.T, s *Stack, name, step string, approve bool, req api.ApprovalRequest) (int, string) {
	t.Helper()
	ctx := context.Background()
	var status int
	var problem *api.Problem
	if approve {
		resp, err := s.Client.ApproveActionWithResponse(ctx, project, domain, name, step, req)
		require.NoError(t, err)
		status, problem = resp.StatusCode(), resp.ApplicationproblemJSON409
	} else {
		resp, err := s.Client.RejectActionWithResponse(ctx, project, domain, name, step, req)
		require.NoError(t, err)
		status, problem = resp.StatusCode(), resp.ApplicationproblemJSON409
	}
	if problem != nil {
		return status, problem.Code
	}
	return status, ""
}

// attemptStates lists a step's attempt states by task generation, in
// attempt order: {0: [FAILED], 1: [SUCCEEDED]}.
func attemptStates(a api.Action) map[int][]api.TaskState {
	out := map[int][]api.TaskState{}
	for _, task := range a.Tasks {
		g := 0
		if task.Generation != nil {
			g = *task.Generation
		}
		for _, at := range task.Attempts {
			out[g] = append(out[g], at.State)
		}
	}
	return out
}

// succeededTwice names every task of run (step/index/generation) with more
// than one SUCCEEDED attempt.
func succeededTwice(run *api.Run) []string {
	var twice []string
	for _, a := range run.Actions {
		for _, task := range a.Tasks {
			n := 0
			for _, at := range task.Attempts {
				if at.State == api.TaskStateSUCCEEDED {
					n++
				}
			}
			if n > 1 {
				twice = append(twice, fmt.Sprintf("%s/%d/gen%d", a.Name, task.Index, *task.Generation))
			}
		}
	}
	return twice
}

// touch creates file in run name's directory, shared by its tasks.
func touch(t *testing.T, s *Stack, name, file string) {
	t.Helper()
	dir := runDir(s, name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, file), nil, 0o644))
}

// untilFile is a command that fails until file exists in the run's
// directory, then succeeds.
func untilFile(file string) *string {
	return ptr(`if [ -e "$CAPSTAN_RUN_DIR/` + file + `" ]; then echo ok; else echo "no ` + file + ` yet" >&2; exit 1; fi`)
}

// failsOnce is a command that fails its first time in a run and succeeds
// after (marker file in the run's directory).
func failsOnce(marker string) *string {
	return ptr(`f="$CAPSTAN_RUN_DIR/` + marker + `"; if [ ! -e "$f" ]; then touch "$f"; echo first try fails >&2; exit 1; fi; echo ok`)
}
