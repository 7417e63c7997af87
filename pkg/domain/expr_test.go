package domain_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// list is a CEL list literal of n ones.
func list(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("1,", n), ",") + "]" }

// nested is depth comprehensions, each over inner, nested in one another.
func nested(depth int, inner string) string {
	expr := "true"
	for i := depth; i > 0; i-- {
		expr = fmt.Sprintf("%s.all(x%d, %s)", inner, i, expr)
	}
	return expr
}

// An expression refused at compile time, for every kind of CEL a spec or a
// trigger holds: longer than MaxExprBytes, or a static cost estimate
// (inputs of EstimatedInputSize elements) over MaxExprCost. What stays
// within them compiles.
func TestCompileExprLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, expr, message string
	}{
		{"longer than 4 KiB", "true" + strings.Repeat(" ", domain.MaxExprBytes), "is 4100 bytes; at most 4096"},
		{"five nested comprehensions over literal lists of 50", nested(5, list(50)), "may cost"},
		{"three nested comprehensions over an input", nested(3, "params.l"), "may cost"},
		{"a literal list product", list(1000) + ".map(a, " + list(1000) + ".map(b, a + b)) == []", "may cost"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := domain.CompileCondition(tc.expr)
			require.ErrorContains(t, err, tc.message)
			_, err = domain.CompileRunKey(`string(` + tc.expr + `)`)
			require.ErrorContains(t, err, tc.message[:5])
			_, errs := domain.CompileTrigger(strings.ReplaceAll(tc.expr, "params.l", "event.payload"), nil, "t")
			require.Len(t, errs, 1)
			require.Equal(t, "t.filter", errs[0].Field)
			require.Contains(t, errs[0].Message, tc.message[:5])
		})
	}
	for _, ok := range []string{nested(2, "params.l"), nested(5, "[1, 2]"), `steps.a.outputs.x.contains("y")`,
		`params.a == "` + strings.Repeat("x", 4000) + `"`} {
		_, err := domain.CompileCondition(ok)
		require.NoError(t, err, ok)
	}
}

// A spec whose `if` is over the limits is refused with a FieldError naming
// the step's if.
func TestValidateConditionLimits(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{`params.a == "` + strings.Repeat("x", domain.MaxExprBytes) + `"`, nested(5, list(50))} {
		spec := dagSpec(withIf(shellStep("a"), expr))
		spec.Normalize()
		errs := spec.Validate("spec")
		require.NotEmpty(t, errs)
		require.Equal(t, "spec.steps[0].if", errs[0].Field, "%v", errs)
	}
}

// A condition over large inputs stops at MaxExprCost when it runs: its step
// FAILS (not SKIPPED) with a reason naming the limit, and the run fails; a
// condition that merely errs still SKIPS its step. (A scan of a long string
// reaches the limit in a millisecond, before MaxBatchTime, even under the
// race detector; a comprehension may reach either.)
func TestConditionCostLimitAtRuntime(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 2<<20)
	c, err := domain.CompileCondition(`params.s.contains("zzz")`)
	require.NoError(t, err)
	_, err = c.Eval(domain.CondVars{Params: map[string]any{"s": long}})
	require.ErrorIs(t, err, domain.ErrExprLimit)
	require.ErrorContains(t, err, "it cost more than 100000 units")

	big := make([]any, 1000)
	for i := range big {
		big[i] = float64(i)
	}
	c, err = domain.CompileCondition(nested(2, "params.l"))
	require.NoError(t, err)
	_, err = c.Eval(domain.CondVars{Params: map[string]any{"l": big}})
	require.ErrorIs(t, err, domain.ErrExprLimit, "a comprehension stops too")

	spec := dagSpec(withIf(shellStep("heavy"), `params.s.contains("zzz")`), withIf(shellStep("missing"), "params.nope"),
		shellStep("after", "heavy"))
	spec.Normalize()
	p := domain.Evaluate(spec, nil, false, map[string]any{"s": long})
	require.Equal(t, []string{"heavy"}, p.Fail)
	require.Equal(t, "its condition failed: expression limit exceeded: it cost more than 100000 units", p.Reasons["heavy"])
	require.Equal(t, []string{"missing", "after"}, p.Skip)
	require.Equal(t, domain.PhaseFailed, p.Phase)

	small := domain.Evaluate(spec, nil, false, map[string]any{"s": "zzz"})
	require.Equal(t, []string{"heavy"}, small.Start, "the same condition over a small input runs")
	require.Empty(t, small.Fail)
}

// The conditions of one Evaluate share MaxBatchCost and MaxBatchTime:
// many steps whose conditions each stay under MaxExprCost fail once they
// spent either together (at most 57 of 17,803 units pass MaxBatchCost;
// on a slow machine MaxBatchTime comes first), and those after them fail at
// once.
func TestConditionsShareABudget(t *testing.T) {
	t.Parallel()
	l := make([]any, 50)
	for i := range l {
		l[i] = float64(i)
	}
	var steps []domain.Step
	for i := range 80 {
		steps = append(steps, withIf(shellStep(fmt.Sprintf("s%02d", i)), "params.l.all(a, params.l.all(b, a + b >= 0))"))
	}
	spec := dagSpec(steps...)
	spec.Normalize()
	p := domain.Evaluate(spec, nil, false, map[string]any{"l": l})
	require.NotEmpty(t, p.Start)
	require.LessOrEqual(t, len(p.Start), 57)
	require.Len(t, p.Fail, len(steps)-len(p.Start))
	require.Contains(t, p.Reasons[p.Fail[len(p.Fail)-1]], "its condition failed: expression limit exceeded: the expressions of one decision")
}

// A step's condition is evaluated once per Evaluate, however often the
// progression goes over the steps again: here a chain of 50 steps, each
// depending on the one after it, is SKIPPED one pass at a time while two
// runnable steps wait (the run is suspended); evaluated on every pass,
// their conditions (11,483 units each) would pass MaxBatchCost.
func TestConditionEvaluatedOnce(t *testing.T) {
	t.Parallel()
	l := make([]any, 40)
	for i := range l {
		l[i] = float64(i)
	}
	steps := []domain.Step{withIf(shellStep("a"), "params.l.all(a, params.l.all(b, a + b >= 0))"),
		withIf(shellStep("b"), "params.l.all(a, params.l.all(b, a + b >= -1))")}
	const chain = 50
	for i := range chain - 1 {
		steps = append(steps, shellStep(fmt.Sprintf("c%02d", i), fmt.Sprintf("c%02d", i+1)))
	}
	steps = append(steps, withIf(shellStep(fmt.Sprintf("c%02d", chain-1)), "false"))
	spec := dagSpec(steps...)
	spec.Normalize()
	p := domain.Evaluate(spec, nil, true, map[string]any{"l": l})
	require.Empty(t, p.Fail)
	require.Len(t, p.Skip, chain)
	require.Equal(t, domain.PhasePaused, p.Phase)
}

// A key expression over large inputs fails at MaxExprCost, and the task
// keys of one step share the decision's budget.
func TestKeyCostLimits(t *testing.T) {
	t.Parallel()
	x, err := domain.CompileRunKey(`params.s.contains("zzz") ? "y" : "n"`)
	require.NoError(t, err)
	_, err = x.Eval(domain.KeyVars{Params: map[string]any{"s": strings.Repeat("a", 2<<20)}})
	require.ErrorContains(t, err, "expression limit exceeded: it cost more than 100000 units")

	step := shellStep("s")
	step.Concurrency = &domain.StepConcurrency{Key: `params.l.all(a, params.l.all(b, a + b >= 0)) ? "y" : "n"`, MaxTasks: 1}
	l := make([]any, 100)
	for i := range l {
		l[i] = float64(i)
	}
	_, errs := step.TaskAdmissions(map[string]any{"l": l}, 100, "step")
	require.Len(t, errs, 1)
	require.Equal(t, "step.concurrency.key", errs[0].Field)
	require.Contains(t, errs[0].Message, "expression limit exceeded: the expressions of one decision")
}
