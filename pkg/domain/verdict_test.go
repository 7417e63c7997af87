package domain_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// EvaluateWith decides from the verdicts ConditionVerdicts found over the
// same status exactly what Evaluate decides, conditions false, failing,
// over their limits and reading steps decided in the same evaluation
// included; without verdicts it evaluates no condition and decides
// nothing, listing the steps whose conditions it needs in Unjudged.
func TestEvaluateWithVerdicts(t *testing.T) {
	t.Parallel()
	spec := dagSpec(shellStep("build"),
		withIf(shellStep("notify", "build"), `steps.build.phase == "FAILED"`),
		withIf(shellStep("publish", "build"), `steps.build.outputs.changed == "true"`),
		withIf(shellStep("report", "publish"), `steps.publish.phase == "SKIPPED"`),
		withIf(shellStep("missing", "build"), `steps.build.outputs.nope == "x"`),
		withIf(shellStep("heavy", "build"), `params.s.contains("zzz")`),
		withIf(shellStep("any", "build"), `steps.exists(k, steps[k].phase == "FAILED")`),
		withIf(shellStep("cleanup", "build"), domain.IfAlways),
		shellStep("deploy", "build"))
	spec.Params = []domain.Param{{Name: "s"}}
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	long := map[string]any{"s": string(make([]byte, 2<<20))}
	for _, status := range []st{
		{"build": {Started: true, Phase: domain.PhaseSucceeded, Outputs: map[string]string{"changed": "no"}}},
		{"build": {Started: true, Phase: domain.PhaseSucceeded, Outputs: map[string]string{"changed": "true"}}},
		{"build": stFailed},
	} {
		want := domain.Evaluate(spec, status, false, long)
		require.NotEmpty(t, want.Fail, "heavy fails at its cost limit")
		v := domain.ConditionVerdicts(spec, status, false, long)
		require.Positive(t, v.Len())
		require.Equal(t, want, domain.EvaluateWith(spec, status, false, long, v))

		none := domain.EvaluateWith(spec, status, false, long, domain.Verdicts{})
		require.Equal(t, []string{"notify", "publish", "missing", "heavy", "any"}, none.Unjudged)
		require.Empty(t, none.Start, "a condition yet unknown may fail the run: nothing is decided")
		require.Empty(t, none.Skip)
		require.Empty(t, none.Fail)
		require.False(t, none.Phase.IsTerminal())
	}
}

// A verdict is taken only while what its condition read is unchanged: the
// phase and outputs of the steps it names (any step, for one that reads
// steps other than by name) and run.failed.
func TestVerdictsFollowWhatTheyRead(t *testing.T) {
	t.Parallel()
	spec := dagSpec(shellStep("a"), shellStep("b"), shellStep("c"),
		withIf(shellStep("named", "a"), `steps.a.outputs.x == "1"`),
		withIf(shellStep("any", "a"), `steps.all(k, steps[k].phase != "ABORTED")`))
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	base := st{"a": {Started: true, Phase: domain.PhaseSucceeded, Outputs: map[string]string{"x": "1"}}, "b": stRunning}
	v := domain.ConditionVerdicts(spec, base, false, nil)
	require.Empty(t, domain.EvaluateWith(spec, base, false, nil, v).Unjudged)

	tests := []struct {
		name     string
		change   func(st)
		unjudged []string
	}{
		{"another output of the step named", func(s st) {
			s["a"] = domain.StepStatus{Started: true, Phase: domain.PhaseSucceeded, Outputs: map[string]string{"x": "2"}}
		}, []string{"named", "any"}},
		{"a step it does not name moved", func(s st) { s["b"] = stSucceeded }, []string{"any"}},
		{"a step it does not name started", func(s st) { s["c"] = stRunning }, []string{"any"}},
		{"run.failed", func(s st) { s["b"] = stFailed }, []string{"named", "any"}},
		{"only Started, which no condition sees", func(s st) {
			s["a"] = domain.StepStatus{Phase: domain.PhaseSucceeded, Outputs: map[string]string{"x": "1"}}
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := maps.Clone(base)
			tc.change(now)
			p := domain.EvaluateWith(spec, now, false, nil, v)
			require.Equal(t, tc.unjudged, p.Unjudged)
		})
	}
}

// FuzzVerdictsDecideAsEvaluate: over random DAGs of conditions and random
// statuses, EvaluateWith with the verdicts found over the same status is
// Evaluate, with nothing unjudged.
func FuzzVerdictsDecideAsEvaluate(f *testing.F) {
	f.Add(uint8(6), []byte{0, 1, 2, 3, 4, 5}, uint64(1))
	f.Add(uint8(10), []byte{5, 5, 4, 3, 2, 1, 0, 3, 3, 3}, uint64(7))
	f.Fuzz(func(t *testing.T, nSteps uint8, conds []byte, seed uint64) {
		n := int(nSteps%10) + 1
		r := rand.New(rand.NewPCG(seed, 2))
		spec := domain.WorkflowSpec{Mode: domain.ModeDAG}
		for i := range n {
			s := shellStep(fmt.Sprintf("s%d", i))
			if i > 0 {
				s.DependsOn = []string{fmt.Sprintf("s%d", r.IntN(i))}
			}
			if len(conds) > i && i > 0 {
				dep := s.DependsOn[0]
				s.If = []string{"", domain.IfAlways, "run.failed", fmt.Sprintf(`steps.%s.phase == "FAILED"`, dep),
					fmt.Sprintf(`steps.%s.outputs.k == "v"`, dep), `steps.exists(k, steps[k].phase == "SKIPPED")`}[conds[i]%6]
			}
			spec.Steps = append(spec.Steps, s)
		}
		spec.Normalize()
		require.Empty(t, spec.Validate("spec"))
		phases := []domain.Phase{domain.PhaseSucceeded, domain.PhaseFailed, domain.PhaseSkipped, domain.PhaseRunning}
		status := st{}
		for _, s := range spec.Steps {
			switch k := r.IntN(5); {
			case k < len(phases):
				x := domain.StepStatus{Started: phases[k] != domain.PhaseSkipped, Phase: phases[k]}
				if r.IntN(2) == 0 {
					x.Outputs = map[string]string{"k": "v"}
				}
				status[s.Name] = x
			}
		}
		want := domain.Evaluate(spec, status, false, nil)
		got := domain.EvaluateWith(spec, status, false, nil, domain.ConditionVerdicts(spec, status, false, nil))
		require.Equal(t, want, got)
	})
}
