package domain

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChildRunName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "r1-fetch-0", ChildRunName("r1", "fetch", 0, 0))
	require.Equal(t, "r1-fetch-3-r2", ChildRunName("r1", "fetch", 3, 2))
	long := ChildRunName(strings.Repeat("a", 40), strings.Repeat("b", 40), 0, 0)
	require.Len(t, long, 63)
	require.True(t, ValidName(long), long)
	require.NotEqual(t, long, ChildRunName(strings.Repeat("a", 40), strings.Repeat("b", 40), 1, 0), "distinct per index")
	alt := AltChildRunName(RunKey{Project: "p", Domain: "d", Run: "r1"}.Action("fetch"), 0, 0)
	require.True(t, ValidName(alt), alt)
	require.NotEqual(t, "r1-fetch-0", alt)
}

// TestDecideChildren: Iris's job derivation over children instead of tasks
// (DESIGN: "the step's phase follows the child's"; a failed child within
// max_retries_failure is retried by a new one).
func TestDecideChildren(t *testing.T) {
	t.Parallel()
	one := func(p Phase, tries int) []ChildView {
		return []ChildView{{Index: 0, Name: "c", Phase: p, Tries: tries}}
	}
	retries := func(n int) Step { return Step{Kind: KindWorkflow, MaxRetriesFailure: &n} }
	for name, tc := range map[string]struct {
		step  Step
		kids  []ChildView
		phase Phase
		retry []int
	}{
		"starting child: QUEUED":                  {Step{}, nil, PhaseQueued, nil},
		"queued child: QUEUED":                    {Step{}, one(PhaseQueued, 1), PhaseQueued, nil},
		"running child: RUNNING":                  {Step{}, one(PhaseRunning, 1), PhaseRunning, nil},
		"paused child: PAUSED":                    {Step{}, one(PhasePaused, 1), PhasePaused, nil},
		"succeeded child: SUCCEEDED":              {Step{}, one(PhaseSucceeded, 1), PhaseSucceeded, nil},
		"failed child, no retries: FAILED":        {Step{}, one(PhaseFailed, 1), PhaseFailed, nil},
		"failed child within retries: retried":    {retries(1), one(PhaseFailed, 1), PhaseRunning, []int{0}},
		"failed child past retries: FAILED":       {retries(1), one(PhaseFailed, 2), PhaseFailed, nil},
		"timed out child within retries: retried": {retries(2), one(PhaseTimedOut, 1), PhaseRunning, []int{0}},
		"aborted child is not retried: FAILED":    {retries(5), one(PhaseAborted, 1), PhaseFailed, nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := tc.step.DecideChildren(1, tc.kids)
			require.Equal(t, tc.phase, d.Phase)
			require.Equal(t, tc.retry, d.Retry)
			if tc.phase == PhaseFailed {
				require.Contains(t, d.Reason, "child run c ended")
			}
		})
	}
	t.Run("many children: a failure within max_task_failures leaves the step running", func(t *testing.T) {
		t.Parallel()
		allowed := 1
		s := Step{Kind: KindWorkflow, MaxTaskFailures: &allowed}
		d := s.DecideChildren(3, []ChildView{{Index: 0, Phase: PhaseFailed, Tries: 1}, {Index: 1, Phase: PhaseRunning, Tries: 1},
			{Index: 2, Phase: PhaseSucceeded, Tries: 1}})
		require.Equal(t, PhaseRunning, d.Phase)
		d = s.DecideChildren(3, []ChildView{{Index: 0, Phase: PhaseFailed, Tries: 1}, {Index: 1, Phase: PhaseFailed, Tries: 1},
			{Index: 2, Phase: PhaseRunning, Tries: 1}})
		require.Equal(t, PhaseFailed, d.Phase)
		require.True(t, d.Survivors)
	})
}

func TestGatherChildOutputs(t *testing.T) {
	t.Parallel()
	per := []map[string]string{{"x": "1\n"}}
	require.Equal(t, map[string]string{"x": "1\n"}, GatherChildOutputs([]string{"x"}, per, false))
	per = append(per, map[string]string{"x": "<2>"}, nil)
	require.Equal(t, map[string]string{"x": `["1\n","<2>",""]`}, GatherChildOutputs([]string{"x"}, per, false))
}

func TestChildParams(t *testing.T) {
	t.Parallel()
	decls := []Param{{Name: "N", Type: ParamNumber, Required: true}, {Name: "S", Type: ParamString, Default: "d"},
		{Name: "J", Type: ParamJSON}}
	s := Step{Kind: KindWorkflow, Inputs: []Input{{From: "a.n", As: "N"}, {From: "a.j", As: "J"}}}
	got, errs := s.ChildParams(decls, map[string]string{"N": "21\n", "J": `{"k": [1]}`}, "", nil)
	require.Empty(t, errs)
	require.Equal(t, map[string]any{"N": 21.0, "S": "d", "J": map[string]any{"k": []any{1.0}}}, got)
	_, errs = s.ChildParams(decls, map[string]string{"N": "many"}, "", nil)
	require.Equal(t, ".inputs[0]", errs[0].Field)
	item := "x"
	got, errs = Step{Kind: KindWorkflow, Params: map[string]any{"N": 1}}.ChildParams(decls, nil, "S", &item)
	require.Empty(t, errs)
	require.Equal(t, "x", got["S"], "the item as its param")
}

func TestCheckSubWorkflows(t *testing.T) {
	t.Parallel()
	wf := func(name string) Step { return Step{Name: "s", Kind: KindWorkflow, Workflow: &WorkflowRef{Name: name}} }
	leaf := WorkflowSpec{Steps: []Step{{Name: "t", Kind: KindTask}}, Outputs: []SpecOutput{{Name: "o", From: "t.o"}},
		Params: []Param{{Name: "P", Type: ParamString, Required: true}}}
	known := TemplateSpecs{{Name: "leaf"}: leaf, {Name: "a"}: {Steps: []Step{wf("b")}}, {Name: "b"}: {Steps: []Step{wf("a")}}}
	field := func(errs []FieldError) []string {
		var out []string
		for _, e := range errs {
			out = append(out, e.Field+": "+e.Message)
		}
		return out
	}
	ok := wf("leaf")
	ok.Params, ok.Outputs = map[string]any{"P": "v"}, []string{"o"}
	require.Empty(t, CheckSubWorkflows(WorkflowSpec{Steps: []Step{ok}}, "spec", known, "", 0))

	bad := wf("leaf")
	bad.Params, bad.Outputs = map[string]any{"Q": 1}, []string{"nope"}
	require.ElementsMatch(t, []string{
		`spec.steps[0].params.Q: unknown param; the template declares P`,
		`spec.steps[0].params: the template's param "P" is required; give it in params or inputs`,
		`spec.steps[0].outputs[0]: template leaf declares no output "nope" (its outputs: o)`,
	}, field(CheckSubWorkflows(WorkflowSpec{Steps: []Step{bad}}, "spec", known, "", 0)))

	each := wf("leaf")
	each.Outputs, each.ForEach = []string{"o"}, &ForEach{Items: &[]any{"x"}, As: "P"}
	require.Empty(t, CheckSubWorkflows(WorkflowSpec{Steps: []Step{each}}, "spec", known, "", 0),
		"the item gives the required param")
	each.ForEach.As = "Q"
	require.Equal(t, []string{
		`spec.steps[0].for_each.as: each item is given as param "Q", which the template does not declare (it declares P)`,
		`spec.steps[0].params: the template's param "P" is required; give it in params or inputs`,
	}, field(CheckSubWorkflows(WorkflowSpec{Steps: []Step{each}}, "spec", known, "", 0)))

	require.Equal(t, []string{"spec.steps[0].workflow.name: no workflow template named ghost"},
		field(CheckSubWorkflows(WorkflowSpec{Steps: []Step{wf("ghost")}}, "spec", known, "", 0)))
	require.Equal(t, []string{"spec.steps[0].workflow.name: template cycle: a -> b -> a"},
		field(CheckSubWorkflows(WorkflowSpec{Steps: []Step{wf("a")}}, "spec", known, "", 0)))
	require.Equal(t, []string{"spec.steps[0].workflow.name: template cycle: b -> a -> b"},
		field(CheckSubWorkflows(WorkflowSpec{Steps: []Step{wf("a")}}, "spec", TemplateSpecs{{Name: "a"}: {Steps: []Step{wf("b")}}}, "b", 0)),
		"a push of b that a runs")

	chain := TemplateSpecs{}
	for i := range 12 {
		spec := WorkflowSpec{Steps: []Step{{Name: "t", Kind: KindTask}}}
		if i < 11 {
			spec = WorkflowSpec{Steps: []Step{wf(string(rune('a' + i + 1)))}}
		}
		chain[WorkflowRef{Name: string(rune('a' + i))}] = spec
	}
	require.Empty(t, CheckSubWorkflows(WorkflowSpec{Steps: []Step{wf("c")}}, "spec", chain, "", 0), "10 levels")
	errs := CheckSubWorkflows(WorkflowSpec{Steps: []Step{wf("b")}}, "spec", chain, "", 0)
	require.Len(t, errs, 1)
	require.Equal(t, "spec.steps[0].workflow", errs[0].Field, "11 levels")
}

func TestWorkflowStepValidation(t *testing.T) {
	t.Parallel()
	spec := WorkflowSpec{Steps: []Step{
		{Name: "w", Kind: KindWorkflow, Command: "true", Params: map[string]any{"bad name": 1}},
		{Name: "t", Command: "true", Workflow: &WorkflowRef{Name: "x"}},
	}, Outputs: []SpecOutput{{Name: "o", From: "t.missing"}}}
	spec.Normalize()
	var fields []string
	for _, e := range spec.Validate("spec") {
		fields = append(fields, e.Field)
	}
	require.ElementsMatch(t, []string{"spec.steps[0].workflow", "spec.steps[0].command", "spec.steps[0].params.bad name",
		"spec.steps[1].workflow"}, fields)
	spec = WorkflowSpec{Steps: []Step{{Name: "t", Command: "true"}}, Outputs: []SpecOutput{{Name: "o", From: "t.missing"}}}
	spec.Normalize()
	require.Equal(t, "spec.outputs[0].from", spec.Validate("spec")[0].Field)
}
