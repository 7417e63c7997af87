package domain_test

import (
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/stretchr/testify/require"
)

// TestDecideAdmission encodes Hatchet's concurrency strategies as Capstan
// takes them: a slot is free while fewer than max_runs holders hold one (a
// stopping holder too); queue admits FIFO within the key; cancel_newest
// ends what it cannot admit; cancel_in_progress keeps the max_runs newest
// unfinished runs, cancelling older holders and ending older waiters.
func TestDecideAdmission(t *testing.T) {
	t.Parallel()
	h := func(run string, newer int, stopping bool) domain.LineRun {
		return domain.LineRun{Run: run, Newer: newer, Stopping: stopping}
	}
	c := func(run string, ahead, newer int) domain.LineRun {
		return domain.LineRun{Run: run, Ahead: ahead, Newer: newer}
	}
	for _, tc := range []struct {
		name string
		line domain.AdmissionLine
		want domain.Admission
	}{
		{"queue: free slots go to the first in line", domain.AdmissionLine{MaxRuns: 2, Strategy: domain.StrategyQueue,
			Holders: []domain.LineRun{h("a", 3, false)}, Candidates: []domain.LineRun{c("b", 0, 2), c("c", 1, 1), c("d", 2, 0)}},
			domain.Admission{Admit: []string{"b"}, Wait: map[string]int{"c": 1, "d": 2}}},
		{"queue: a run behind a waiter outside the decision waits", domain.AdmissionLine{MaxRuns: 1, Strategy: domain.StrategyQueue,
			Candidates: []domain.LineRun{c("z", 1, 0)}},
			domain.Admission{Wait: map[string]int{"z": 2}}},
		{"queue: a stopping holder keeps its slot", domain.AdmissionLine{MaxRuns: 1, Strategy: domain.StrategyQueue,
			Holders: []domain.LineRun{h("a", 1, true)}, Candidates: []domain.LineRun{c("b", 0, 0)}},
			domain.Admission{Wait: map[string]int{"b": 1}}},
		{"queue: more holders than max_runs (a lowered limit) admits none", domain.AdmissionLine{MaxRuns: 1,
			Strategy: domain.StrategyQueue, Holders: []domain.LineRun{h("a", 2, false), h("b", 1, false)},
			Candidates: []domain.LineRun{c("c", 0, 0)}},
			domain.Admission{Wait: map[string]int{"c": 1}}},
		{"cancel_newest: over the limit ends at once", domain.AdmissionLine{MaxRuns: 1, Strategy: domain.StrategyCancelNewest,
			Holders: []domain.LineRun{h("a", 1, false)}, Candidates: []domain.LineRun{c("b", 0, 0)}},
			domain.Admission{End: []string{"b"}, Wait: map[string]int{}}},
		{"cancel_newest: a free slot admits", domain.AdmissionLine{MaxRuns: 2, Strategy: domain.StrategyCancelNewest,
			Holders: []domain.LineRun{h("a", 1, false)}, Candidates: []domain.LineRun{c("b", 0, 0)}},
			domain.Admission{Admit: []string{"b"}, Wait: map[string]int{}}},
		{"cancel_in_progress: the oldest holder is cancelled, the new run waits for it", domain.AdmissionLine{MaxRuns: 1,
			Strategy: domain.StrategyCancelInProgress, Holders: []domain.LineRun{h("a", 1, false)},
			Candidates: []domain.LineRun{c("b", 0, 0)}},
			domain.Admission{Wait: map[string]int{"b": 1}, Cancel: []string{"a"}}},
		{"cancel_in_progress: a stopping holder is not cancelled twice", domain.AdmissionLine{MaxRuns: 1,
			Strategy: domain.StrategyCancelInProgress, Holders: []domain.LineRun{h("a", 1, true)},
			Candidates: []domain.LineRun{c("b", 0, 0)}},
			domain.Admission{Wait: map[string]int{"b": 1}}},
		{"cancel_in_progress: superseded waiters end, the newest is admitted once free", domain.AdmissionLine{MaxRuns: 1,
			Strategy: domain.StrategyCancelInProgress, Candidates: []domain.LineRun{c("a", 0, 2), c("b", 1, 1), c("c", 2, 0)}},
			domain.Admission{Admit: []string{"c"}, End: []string{"a", "b"}, Wait: map[string]int{}}},
		{"cancel_in_progress: with max_runs 2 the two newest survive", domain.AdmissionLine{MaxRuns: 2,
			Strategy: domain.StrategyCancelInProgress, Holders: []domain.LineRun{h("a", 3, false), h("b", 2, false)},
			Candidates: []domain.LineRun{c("c", 0, 1), c("d", 1, 0)}},
			domain.Admission{Wait: map[string]int{"c": 1, "d": 2}, Cancel: []string{"a", "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := domain.DecideAdmission(tc.line)
			require.Equal(t, tc.want, got)
			admitted := len(tc.line.Holders) + len(got.Admit)
			require.LessOrEqual(t, len(got.Admit), max(tc.line.MaxRuns-len(tc.line.Holders), 0),
				"never more than max_runs hold a slot (%d)", admitted)
		})
	}
}

// TestAdmissionKeys: keys are CEL string expressions over params; an
// empty string is the key "", a key that fails or is not a string is a
// field error.
func TestAdmissionKeys(t *testing.T) {
	t.Parallel()
	spec := func(key, fair string) domain.WorkflowSpec {
		return domain.WorkflowSpec{Concurrency: &domain.Concurrency{Key: key, MaxRuns: 1}, FairnessKey: fair}
	}
	keys, errs := spec(`params.env + "-deploy"`, `params.team`).AdmissionKeys(map[string]any{"env": "prod", "team": "a"}, "spec")
	require.Empty(t, errs)
	require.Equal(t, "prod-deploy", *keys.Concurrency)
	require.Equal(t, "a", keys.Fairness)
	keys, errs = spec(`""`, "").AdmissionKeys(nil, "spec")
	require.Empty(t, errs)
	require.Equal(t, "", *keys.Concurrency, `"" is a key`)
	_, errs = spec(`params.missing`, `1 + 2`).AdmissionKeys(nil, "workflow")
	require.Len(t, errs, 2)
	require.Equal(t, "workflow.concurrency.key", errs[0].Field)
	require.Contains(t, errs[0].Message, "fails")
	require.Equal(t, "workflow.fairness_key", errs[1].Field)
	_, errs = spec(`params.n`, "").AdmissionKeys(map[string]any{"n": 3.0}, "spec")
	require.Contains(t, errs[0].Message, "not a string")
}

// TestValidateAdmissionFields: a key that does not compile or is not a
// string, max_runs or max_tasks below 1, an unknown strategy, units below
// 1 and a repeated rate limit are 422s naming their field.
func TestValidateAdmissionFields(t *testing.T) {
	t.Parallel()
	zero, two := 0, 2
	spec := domain.WorkflowSpec{Concurrency: &domain.Concurrency{Key: `params.x +`, MaxRuns: 0, Strategy: "drop"},
		FairnessKey: `1`, Steps: []domain.Step{{Name: "s", Command: "true",
			Concurrency: &domain.StepConcurrency{Key: `"db"`, MaxTasks: 0},
			RateLimits:  []domain.RateLimitUse{{Name: "api", Units: &zero}, {Name: "api", Units: &two, Key: `ITEM +`}}}}}
	spec.Normalize()
	var fields []string
	for _, e := range spec.Validate("spec") {
		fields = append(fields, e.Field)
	}
	require.ElementsMatch(t, []string{"spec.concurrency.key", "spec.concurrency.max_runs", "spec.concurrency.strategy",
		"spec.fairness_key", "spec.steps[0].concurrency.max_tasks", "spec.steps[0].rate_limits[0].units",
		"spec.steps[0].rate_limits[1].name", "spec.steps[0].rate_limits[1].key"}, fields)
}

// TestWaitReason names the key and the place.
func TestWaitReason(t *testing.T) {
	t.Parallel()
	require.Equal(t, `concurrency key "prod": 2nd in line for 1 slot`, domain.WaitReason("prod", 2, 1))
	require.Equal(t, `concurrency key "": 11th in line for 3 slots`, domain.WaitReason("", 11, 3))
	require.Equal(t, `concurrency key "x": 23rd in line for 3 slots`, domain.WaitReason("x", 23, 3))
}
