package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// TestWorkflow runs the workflow features (conditions and clean-up,
// outputs and inputs, approvals, retry-then-suspend, restart) on one stack
// of four services, each scenario a parallel subtest. The faults (a
// scheduler killed during a timed wait, Redis wiped mid-run) have their own
// stack in TestWorkflowFaults.
func TestWorkflow(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Env: workflowEnv})

	t.Run("Conditions", func(t *testing.T) { t.Parallel(); testConditions(t, s) })
	t.Run("Outputs", func(t *testing.T) { t.Parallel(); testOutputs(t, s) })
	t.Run("Approval", func(t *testing.T) { t.Parallel(); testApproval(t, s) })
	t.Run("RetryThenSuspend", func(t *testing.T) { t.Parallel(); testRetryThenSuspend(t, s) })
	t.Run("Restart", func(t *testing.T) { t.Parallel(); testRestart(t, s) })
}

// testConditions: build fails; notify (its condition reads build's phase)
// and cleanup (if: always) run, deploy (plain, after build) is SKIPPED, and
// the run ends FAILED once the clean-up is done.
func testConditions(t *testing.T, s *Stack) {
	name := create(t, s, api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "build", Command: ptr("echo compiling; exit 2")},
		{Name: "deploy", DependsOn: &[]string{"build"}, Command: ptr("echo deploying")},
		{Name: "notify", DependsOn: &[]string{"build"}, If: ptr(`steps.build.phase == "FAILED"`),
			Command: ptr("echo build failed, telling the team")},
		{Name: "cleanup", DependsOn: &[]string{"deploy", "notify"}, If: ptr("always"), Command: ptr("echo cleaned up")},
	}})
	run := waitPhase(t, s, name, 30*time.Second, api.PhaseFAILED)

	build := action(run, "build")
	require.Equal(t, api.PhaseFAILED, build.Phase)
	require.Equal(t, 2, *build.Tasks[0].Attempts[0].ExitCode)
	deploy := action(run, "deploy")
	require.Equal(t, api.PhaseSKIPPED, deploy.Phase)
	require.Empty(t, deploy.Tasks, "a SKIPPED step starts no task")
	for _, step := range []string{"notify", "cleanup"} {
		a := action(run, step)
		require.Equal(t, api.PhaseSUCCEEDED, a.Phase, step)
		require.Equal(t, map[int][]api.TaskState{0: {api.TaskStateSUCCEEDED}}, attemptStates(a), step)
	}
	require.Contains(t, logs(t, s, name, "notify", 0, 1), "build failed")
	require.Contains(t, logs(t, s, name, "cleanup", 0, 1), "cleaned up")
	notify, cleanup := action(run, "notify"), action(run, "cleanup")
	require.False(t, cleanup.StartedAt.Before(*notify.EndedAt), "cleanup waits for notify")
	require.False(t, run.EndedAt.Before(*cleanup.EndedAt), "the run ends after its clean-up")
}

// testOutputs: count writes outputs (one of exactly 64 KiB), report gets one
// as an environment variable and a file, conditions read it, GET run shows
// it; an output over 1 MiB fails its attempt with a message naming it.
func testOutputs(t *testing.T, s *Stack) {
	name := create(t, s, api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "count", Outputs: &[]string{"lines", "edge"}, Command: ptr(`printf 42 > "$CAPSTAN_OUTPUTS_DIR/lines"; ` +
			`head -c 65536 /dev/zero | tr '\0' x > "$CAPSTAN_OUTPUTS_DIR/edge"`)},
		{Name: "report", Inputs: &[]api.StepInput{{From: "count.lines", As: "LINES"}},
			Command: ptr(`echo "env LINES=$LINES"; echo "file LINES=$(cat "$CAPSTAN_INPUTS_DIR/LINES")"`)},
		{Name: "check", If: ptr(`steps.count.outputs.lines == "42"`), Command: ptr("echo 42 it is")},
		{Name: "never", If: ptr(`int(steps.count.outputs.lines) > 100`), Command: ptr("echo unreachable")},
	}})
	run := waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
	require.Equal(t, api.PhaseSUCCEEDED, action(run, "check").Phase)
	require.Equal(t, api.PhaseSKIPPED, action(run, "never").Phase)
	out := logs(t, s, name, "report", 0, 1)
	require.Contains(t, out, "env LINES=42\n")
	require.Contains(t, out, "file LINES=42\n")
	outputs := action(run, "count").Outputs
	require.NotNil(t, outputs, "GET run shows count's outputs")
	require.Equal(t, "42", (*outputs)["lines"])
	require.Len(t, (*outputs)["edge"], 64<<10, "an output of exactly 64 KiB is allowed")

	// echo's newline is trimmed, as $(...) trims it: the next step can cd to
	// the directory the first one wrote.
	echoed := create(t, s, api.WorkflowSpec{Steps: []api.Step{
		{Name: "make", Outputs: &[]string{"x", "dir"}, Command: ptr(`echo value > "$CAPSTAN_OUTPUTS_DIR/x"; ` +
			`mkdir -p "$CAPSTAN_RUN_DIR/src"; echo "$CAPSTAN_RUN_DIR/src" > "$CAPSTAN_OUTPUTS_DIR/dir"`)},
		{Name: "use", Inputs: &[]api.StepInput{{From: "make.x", As: "X"}, {From: "make.dir", As: "DIR"}},
			Command: ptr(`cd "$DIR" && [ "$X" = value ] && printf '[%s]' "$X"`)},
	}})
	waitPhase(t, s, echoed, 30*time.Second, api.PhaseSUCCEEDED)
	require.Equal(t, "[value]", logs(t, s, echoed, "use", 0, 1))

	big := create(t, s, api.WorkflowSpec{Steps: []api.Step{
		{Name: "big", Outputs: &[]string{"blob"}, Command: ptr(`head -c 1048577 /dev/zero | tr '\0' x > "$CAPSTAN_OUTPUTS_DIR/blob"`)},
		{Name: "use", Inputs: &[]api.StepInput{{From: "big.blob", As: "BLOB"}}, Command: ptr("echo got it")},
	}})
	run = waitPhase(t, s, big, 30*time.Second, api.PhaseFAILED)
	a := action(run, "big")
	require.Equal(t, api.PhaseFAILED, a.Phase)
	attempt := a.Tasks[0].Attempts[0]
	require.Equal(t, api.TaskStateFAILED, attempt.State)
	require.NotNil(t, attempt.Error, "the failed attempt says why")
	require.Contains(t, *attempt.Error, "blob", "the error names the output")
	require.Equal(t, api.PhaseSKIPPED, action(run, "use").Phase)
	t.Logf("over-size output: %s", *attempt.Error)
}

// approvalSpec: build, then the gate, then ship.
var approvalSpec = api.WorkflowSpec{Steps: []api.Step{
	{Name: "build", Command: ptr("echo built")},
	{Name: "gate", Kind: ptr("approval")},
	{Name: "ship", Command: ptr("echo shipped")},
}}

// waitGate waits until run name is PAUSED at its gate, waiting for a decision.
func waitGate(t *testing.T, s *Stack, name string) *api.Run {
	t.Helper()
	return waitRun(t, s, name, 30*time.Second, "PAUSED at the gate", func(r *api.Run) bool {
		require.Nil(t, r.EndedAt, "run ended %s before a decision", r.Phase)
		g := action(r, "gate")
		return r.Phase == api.PhasePAUSED && g.Phase == api.PhasePAUSED && g.WaitingFor != nil && *g.WaitingFor == "approval"
	})
}

// testApproval: an approval step holds the run PAUSED until approved, then
// the run SUCCEEDS showing who approved (the token, and the label by) and
// why; a reject ends a run FAILED
// with reason rejected.
func testApproval(t *testing.T, s *Stack) {
	name := create(t, s, approvalSpec)
	run := waitGate(t, s, name)
	require.Equal(t, api.PhaseSUCCEEDED, action(run, "build").Phase)
	require.Empty(t, action(run, "ship").Tasks, "nothing after the gate starts before the approval")
	before := time.Now()
	code, _ := decide(t, s, name, "gate", true, api.ApprovalRequest{By: ptr("ann"), Comment: ptr("ship it")})
	require.Equal(t, http.StatusAccepted, code)
	run = waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
	gate := action(run, "gate")
	require.Equal(t, api.PhaseSUCCEEDED, gate.Phase)
	require.NotNil(t, gate.Approval)
	require.Equal(t, api.Approved, gate.Approval.Decision)
	require.Equal(t, "ann", *gate.Approval.By, "the label the request gave")
	require.Equal(t, "admin", *gate.Approval.TokenId, "recorded as the token that asked: the stack's admin")
	require.Equal(t, "admin", *gate.Approval.TokenName)
	require.Equal(t, "ship it", *gate.Approval.Comment)
	require.WithinDuration(t, before, gate.Approval.At, 10*time.Second)
	require.Equal(t, api.PhaseSUCCEEDED, action(run, "ship").Phase)
	code, problem := decide(t, s, name, "gate", true, api.ApprovalRequest{})
	require.Equal(t, http.StatusConflict, code, "a decided gate takes no second decision")
	require.Equal(t, "not_waiting_for_approval", problem)

	rejected := create(t, s, approvalSpec)
	waitGate(t, s, rejected)
	code, _ = decide(t, s, rejected, "gate", false, api.ApprovalRequest{By: ptr("bob"), Comment: ptr("not today")})
	require.Equal(t, http.StatusAccepted, code)
	run = waitPhase(t, s, rejected, 30*time.Second, api.PhaseFAILED)
	gate = action(run, "gate")
	require.Equal(t, api.PhaseFAILED, gate.Phase)
	require.Equal(t, "rejected", *gate.Reason)
	require.Equal(t, api.Rejected, gate.Approval.Decision)
	require.Equal(t, "bob", *gate.Approval.By)
	require.Equal(t, "not today", *gate.Approval.Comment)
	require.Equal(t, api.PhaseSKIPPED, action(run, "ship").Phase)
}

// testRetryThenSuspend: a step with on_failure: suspend that keeps failing
// is retried CAPSTAN_WORKFLOW_MAX_STEP_RETRIES (2) times as a whole, then the
// run is PAUSED with step_retries shown; a resume retries it, and once the
// command can succeed the run SUCCEEDS.
func testRetryThenSuspend(t *testing.T, s *Stack) {
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{
		{Name: "flaky", OnFailure: ptr("suspend"), Command: untilFile("ready")},
		{Name: "after", Command: ptr("echo after")},
	}})
	run := waitRun(t, s, name, 30*time.Second, "PAUSED after the retries", func(r *api.Run) bool {
		require.Nil(t, r.EndedAt, "run ended %s: on_failure suspend never fails it", r.Phase)
		return r.Phase == api.PhasePAUSED
	})
	flaky := action(run, "flaky")
	require.Equal(t, api.PhasePAUSED, flaky.Phase)
	require.Equal(t, "resume", *flaky.WaitingFor)
	require.Equal(t, map[int][]api.TaskState{0: {api.TaskStateFAILED}, 1: {api.TaskStateFAILED}, 2: {api.TaskStateFAILED}},
		attemptStates(flaky), "the first run and 2 retries of the whole step, each a generation")
	require.Equal(t, 2, *flaky.Generation)
	// step_retries counts the step's failures (the scheduler's own test pins
	// 3 for MaxStepRetries 2), and the reason says so.
	require.Equal(t, 3, *flaky.StepRetries)
	require.Contains(t, *flaky.Reason, "failed 3 times")
	require.Empty(t, action(run, "after").Tasks)

	touch(t, s, name, "ready")
	resumeRun(t, s, name)
	run = waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
	flaky = action(run, "flaky")
	require.Equal(t, 3, *flaky.Generation, "the resume retried the step")
	require.Equal(t, []api.TaskState{api.TaskStateSUCCEEDED}, attemptStates(flaky)[3])
	require.Zero(t, *flaky.StepRetries, "a resume retries with a fresh count")
	require.Equal(t, api.PhaseSUCCEEDED, action(run, "after").Phase)
}

// testRestart: a failed 3-step run restarted from its failed step re-runs
// that step and the one after it, under their next generation, keeps the
// first step's success, and SUCCEEDS.
func testRestart(t *testing.T, s *Stack) {
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{
		{Name: "one", Command: ptr("echo one")},
		{Name: "two", Command: untilFile("fixed")},
		{Name: "three", Command: ptr("echo three")},
	}})
	run := waitPhase(t, s, name, 30*time.Second, api.PhaseFAILED)
	require.Equal(t, api.PhaseSKIPPED, action(run, "three").Phase)

	touch(t, s, name, "fixed")
	restartRun(t, s, name, "two")
	waitRun(t, s, name, 30*time.Second, "restart applied", func(r *api.Run) bool {
		return *action(r, "two").Generation == 1
	})
	run = waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)

	one, two, three := action(run, "one"), action(run, "two"), action(run, "three")
	require.Equal(t, 0, *one.Generation, "one is not re-run")
	require.Equal(t, map[int][]api.TaskState{0: {api.TaskStateSUCCEEDED}}, attemptStates(one))
	require.Equal(t, map[int][]api.TaskState{0: {api.TaskStateFAILED}, 1: {api.TaskStateSUCCEEDED}}, attemptStates(two),
		"two keeps its failed attempt and runs once more")
	require.Equal(t, 1, *three.Generation, "three, after two, is reset too")
	require.Equal(t, map[int][]api.TaskState{1: {api.TaskStateSUCCEEDED}}, attemptStates(three),
		"three runs once, under its new generation")
	for _, a := range []api.Action{one, two, three} {
		require.Equal(t, api.PhaseSUCCEEDED, a.Phase, a.Name)
	}
	resp, err := s.Client.RestartRunWithResponse(t.Context(), project, domain, name, api.RestartRequest{})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, resp.StatusCode(), "a SUCCEEDED run is not restartable")
	require.Equal(t, "not_restartable", resp.ApplicationproblemJSON409.Code)

	// Each generation's task numbers its attempts from 1, and GET
	// .../tasks/{task}/attempts/{n}/logs names no generation: it must then
	// show the current generation's attempt (what `capstan logs` asks for).
	t.Run("LogsOfLatestGeneration", func(t *testing.T) {
		got := logs(t, s, name, "two", 0, 1)
		require.Contains(t, got, "ok", "logs of two/tasks/0/attempts/1 after the restart: %q, want generation 1's", got)
	})
}
