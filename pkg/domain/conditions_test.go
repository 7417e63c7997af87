package domain_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

func withIf(s domain.Step, cond string) domain.Step { s.If = cond; return s }

// The conditions of KubeVela's and Argo's workflows: `if` absent runs a step
// when every dependency SUCCEEDED and nothing failed; `always` runs it
// whatever happened (a clean-up); an expression over steps.<name>.phase,
// steps.<name>.outputs.<key> and run.failed decides; a false one SKIPS it,
// and a step whose dependency was SKIPPED is SKIPPED too unless its own if
// says otherwise. After a failure no new step starts except those whose if
// lets them; the run ends with the failure's phase once they finish.
func TestEvaluateConditions(t *testing.T) {
	t.Parallel()
	onFailure := dagSpec(shellStep("build"), withIf(shellStep("notify", "build"), `steps.build.phase == "FAILED"`),
		withIf(shellStep("cleanup", "build"), domain.IfAlways), shellStep("deploy", "build"))
	changed := dagSpec(shellStep("check"), withIf(shellStep("publish", "check"), `steps.check.outputs.changed == "true"`),
		shellStep("announce", "publish"), withIf(shellStep("report", "publish"), `steps.publish.phase == "SKIPPED"`))
	tests := []struct {
		name   string
		spec   domain.WorkflowSpec
		status st
		start  []string
		skip   []string
		phase  domain.Phase
	}{
		{"a failed build: the condition on its failure and the clean-up run, deploy is SKIPPED", onFailure,
			st{"build": stFailed}, []string{"notify", "cleanup"}, []string{"deploy"}, domain.PhaseRunning},
		{"the run ends with the failure's phase once the clean-up finished", onFailure,
			st{"build": stFailed, "notify": stSucceeded, "cleanup": stSucceeded, "deploy": stSkippedIf}, nil, nil,
			domain.PhaseFailed},
		{"a good build: the failure's condition is false, the clean-up still runs", onFailure,
			st{"build": stSucceeded}, []string{"cleanup", "deploy"}, []string{"notify"}, domain.PhaseRunning},
		{"an output read by a condition: true runs the step", changed,
			st{"check": {Started: true, Phase: domain.PhaseSucceeded, Outputs: map[string]string{"changed": "true"}}},
			[]string{"publish"}, nil, domain.PhaseRunning},
		{"false SKIPS it, its plain dependent is SKIPPED too, a condition on the skip runs", changed,
			st{"check": {Started: true, Phase: domain.PhaseSucceeded, Outputs: map[string]string{"changed": "no"}}},
			[]string{"report"}, []string{"publish", "announce"}, domain.PhaseRunning},
		{"an output the step did not write fails the condition: SKIPPED", changed,
			st{"check": stSucceeded}, []string{"report"}, []string{"publish", "announce"}, domain.PhaseRunning},
		{"run.failed", dagSpec(shellStep("a"), shellStep("b"), withIf(shellStep("c", "a"), "run.failed")),
			st{"a": stSucceeded, "b": stFailed}, []string{"c"}, nil, domain.PhaseRunning},
		{"StepByStep: after a failure the plain steps are SKIPPED and the clean-up at the end runs",
			domain.WorkflowSpec{Mode: domain.ModeStepByStep, Steps: []domain.Step{shellStep("s1"), shellStep("s2"),
				shellStep("s3"), withIf(shellStep("s4"), domain.IfAlways)}},
			st{"s1": stSucceeded, "s2": stFailed}, []string{"s4"}, []string{"s3"}, domain.PhaseRunning},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Normalize()
			require.Empty(t, tc.spec.Validate("spec"))
			p := domain.Evaluate(tc.spec, tc.status, false, nil)
			require.Equal(t, tc.start, p.Start, "Start")
			require.Equal(t, tc.skip, p.Skip, "Skip")
			require.Equal(t, tc.phase, p.Phase, "Phase")
		})
	}
}

// An input implies the dependency on its producer in DAG mode (KubeVela);
// a suspend in force starts nothing and pauses the run once nothing runs.
func TestEvaluateInputsAndSuspend(t *testing.T) {
	t.Parallel()
	count := shellStep("count")
	count.Outputs = []string{"total"}
	report := shellStep("report")
	report.Inputs = []domain.Input{{From: "count.total", As: "TOTAL"}}
	spec := dagSpec(count, report)
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	require.Equal(t, []string{"count"}, spec.Dependencies(1))
	require.Equal(t, []string{"count"}, domain.Evaluate(spec, nil, false, nil).Start)
	require.Empty(t, domain.Evaluate(spec, st{"count": stRunning}, false, nil).Start, "report waits for its producer")
	require.Equal(t, []string{"report"}, domain.Evaluate(spec, st{"count": stSucceeded}, false, nil).Start)

	p := domain.Evaluate(spec, st{"count": stSucceeded}, true, nil)
	require.Empty(t, p.Start, "no new step starts while suspended")
	require.Equal(t, domain.PhasePaused, p.Phase)
	require.Equal(t, domain.PhaseRunning, domain.Evaluate(spec, st{"count": stRunning}, true, nil).Phase,
		"running tasks finish first")
}

// A restart re-runs a step and everything downstream of it, or by default
// every step that did not succeed and what follows them (`argo retry`).
func TestRestartSteps(t *testing.T) {
	t.Parallel()
	status := st{"a": stSucceeded, "b": stFailed, "c": stSucceeded, "d": stSkippedIf}
	require.Equal(t, []string{"b", "d"}, domain.RestartSteps(diamond, status, "b"))
	require.Equal(t, []string{"b", "d"}, domain.RestartSteps(diamond, status, ""))
	require.Equal(t, []string{"a", "b", "c", "d"}, domain.RestartSteps(diamond, status, "a"))
	seq := seqSpec("s1", "s2", "s3")
	require.Equal(t, []string{"s2", "s3"}, domain.RestartSteps(seq, st{"s1": stSucceeded, "s2": stFailed}, ""))
}

// The new fields' validation names each offending field.
func TestValidateWorkflowFields(t *testing.T) {
	t.Parallel()
	out := shellStep("a")
	out.Outputs = []string{"n"}
	in := func(from, as string) domain.Step {
		s := shellStep("b")
		s.Inputs = []domain.Input{{From: from, As: as}}
		return s
	}
	tests := []struct {
		name  string
		spec  domain.WorkflowSpec
		field string
	}{
		{"a condition that does not compile", dagSpec(withIf(shellStep("a"), "steps.x.phase ==")), "spec.steps[0].if"},
		{"a condition that is not a boolean", dagSpec(withIf(shellStep("a"), `"yes"`)), "spec.steps[0].if"},
		{"a condition on an unknown step", dagSpec(withIf(shellStep("a"), `steps.zz.phase == "FAILED"`)), "spec.steps[0].if"},
		{"StepByStep: a condition on a later step", domain.WorkflowSpec{Steps: []domain.Step{
			withIf(shellStep("a"), `steps.b.phase == "FAILED"`), shellStep("b")}}, "spec.steps[0].if"},
		{"an input of an undeclared output", dagSpec(out, in("a.m", "M")), "spec.steps[1].inputs[0].from"},
		{"an input of an unknown step", dagSpec(out, in("zz.n", "N")), "spec.steps[1].inputs[0].from"},
		{"an input with a reserved name", dagSpec(out, in("a.n", "CAPSTAN_N")), "spec.steps[1].inputs[0].as"},
		{"StepByStep: an input of a later step", domain.WorkflowSpec{Steps: []domain.Step{in("a.n", "N"), func() domain.Step {
			s := out
			s.Name = "a"
			return s
		}()}}, "spec.steps[0].inputs[0].from"},
		{"a bad output name", dagSpec(func() domain.Step { s := shellStep("a"); s.Outputs = []string{"a/b"}; return s }()),
			"spec.steps[0].outputs[0]"},
		{"a suspend with a command", dagSpec(domain.Step{Name: "w", Kind: domain.KindSuspend, Command: "x"}), "spec.steps[0].command"},
		{"a suspend's bad duration", dagSpec(domain.Step{Name: "w", Kind: domain.KindSuspend, Duration: "soon"}), "spec.steps[0].duration"},
		{"a duration on an approval", dagSpec(domain.Step{Name: "w", Kind: domain.KindApproval, Duration: "3s"}), "spec.steps[0].duration"},
		{"an unknown failure policy", dagSpec(func() domain.Step { s := shellStep("a"); s.OnFailure = "retry"; return s }()),
			"spec.steps[0].on_failure"},
		{"a cycle through an input", dagSpec(func() domain.Step {
			s := shellStep("a", "b")
			s.Outputs = []string{"n"}
			return s
		}(), func() domain.Step { s := in("a.n", "N"); s.Outputs = []string{"m"}; return s }()), "spec.steps[0].depends_on"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Normalize()
			errs := tc.spec.Validate("spec")
			require.NotEmpty(t, errs)
			require.Equal(t, tc.field, errs[0].Field, "%v", errs)
		})
	}
	ok := dagSpec(domain.Step{Name: "w", Kind: domain.KindSuspend, Duration: "3s"}, domain.Step{Name: "ok", Kind: domain.KindApproval},
		withIf(shellStep("x", "w"), `steps.ok.phase == "SUCCEEDED" && !run.failed`), out, in("a.n", "N"))
	ok.Normalize()
	require.Empty(t, ok.Validate("spec"))
}

// FuzzEvaluateConditions drives random DAGs whose steps carry conditions
// (absent, always, run.failed, a dependency's phase) to their end: a run
// always reaches a terminal or PAUSED phase, no step starts twice, a step
// starts only once its dependencies ended, and a step without a condition
// never starts after a failure.
func FuzzEvaluateConditions(f *testing.F) {
	f.Add(uint8(5), []byte{0, 1, 2, 3, 0}, []byte{2, 1, 1, 1, 1}, uint64(1))
	f.Add(uint8(8), []byte{1, 1, 1, 1, 1, 1, 1, 1}, []byte{2, 2, 2, 2, 2, 2, 2, 2}, uint64(2))
	f.Add(uint8(3), []byte{}, []byte{3, 3, 3}, uint64(3))
	f.Fuzz(func(t *testing.T, nSteps uint8, conds, script []byte, seed uint64) {
		n := int(nSteps%12) + 1
		r := rand.New(rand.NewPCG(seed, 1))
		spec := domain.WorkflowSpec{Mode: domain.ModeDAG}
		for i := range n {
			s := shellStep(fmt.Sprintf("s%d", i))
			if i > 0 {
				s.DependsOn = []string{fmt.Sprintf("s%d", r.IntN(i))}
			}
			if len(conds) > i {
				switch conds[i] % 4 {
				case 1:
					s.If = domain.IfAlways
				case 2:
					s.If = "run.failed"
				case 3:
					if i > 0 {
						s.If = fmt.Sprintf(`steps.%s.phase == "FAILED"`, s.DependsOn[0])
					}
				}
			}
			spec.Steps = append(spec.Steps, s)
		}
		spec.Normalize()
		require.Empty(t, spec.Validate("spec"))
		outcomes := []domain.Phase{domain.PhaseSucceeded, domain.PhaseFailed, domain.PhasePaused, domain.PhaseAborted}
		status, started := st{}, map[string]bool{}
		for iter := 0; ; iter++ {
			require.Less(t, iter, 4*n+8, "the run did not end")
			p := domain.Evaluate(spec, status, false, nil)
			failed := false
			for _, x := range status {
				failed = failed || x.Phase.IsTerminal() && x.Phase != domain.PhaseSucceeded && x.Phase != domain.PhaseSkipped
			}
			for _, name := range p.Skip {
				status[name] = stSkippedIf
			}
			for _, name := range p.Start {
				require.False(t, started[name], "%s started twice", name)
				started[name] = true
				for j, s := range spec.Steps {
					if s.Name != name {
						continue
					}
					for _, d := range spec.Dependencies(j) {
						require.True(t, status[d].Phase.IsTerminal(), "%s started before %s ended", name, d)
					}
					require.False(t, s.If == "" && failed, "%s has no condition and started after a failure", name)
				}
				status[name] = stRunning
			}
			if p.Phase.IsTerminal() || p.Phase == domain.PhasePaused && len(p.Start) == 0 && !anyRunning(status) {
				if p.Phase == domain.PhasePaused {
					for name, x := range status { // a resume: paused steps succeed
						if x.Phase == domain.PhasePaused {
							status[name] = stSucceeded
						}
					}
					continue
				}
				return
			}
			for name, x := range status {
				if x.Phase == domain.PhaseRunning {
					out := domain.PhaseSucceeded
					if len(script) > 0 {
						out, script = outcomes[int(script[0])%len(outcomes)], script[1:]
					}
					status[name] = domain.StepStatus{Started: true, Phase: out}
				}
			}
		}
	})
}

func anyRunning(status st) bool {
	for _, x := range status {
		if x.Phase == domain.PhaseRunning {
			return true
		}
	}
	return false
}
