package domain_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/stretchr/testify/require"
)

// forEachSpec is a DAG whose step "each" takes fe (and list, when set,
// writes the output "files").
func forEachSpec(t *testing.T, js string) domain.WorkflowSpec {
	t.Helper()
	var w domain.WorkflowSpec
	require.NoError(t, json.Unmarshal([]byte(js), &w))
	w.Normalize()
	return w
}

// TestForEachValidation checks the 422s of a for_each: both or neither of
// from and items, from naming an unknown step or an output it does not
// declare, as that is not an env name, max_parallel < 1, and the fields
// that do not go with it.
func TestForEachValidation(t *testing.T) {
	t.Parallel()
	list := `{"name": "list", "command": "ls", "outputs": ["files"]}`
	for _, tc := range []struct {
		name, step, field, msg string
	}{
		{"valid from", `{"name": "each", "command": "wc -l", "for_each": {"from": "list.files", "max_parallel": 3}}`, "", ""},
		{"valid items", `{"name": "each", "command": "x", "for_each": {"items": [1, "a", {"b": 2}], "as": "FILE"}}`, "", ""},
		{"valid empty items", `{"name": "each", "command": "x", "for_each": {"items": []}}`, "", ""},
		{"both", `{"name": "each", "command": "x", "for_each": {"from": "list.files", "items": [1]}}`,
			"spec.steps[1].for_each", "exactly one of from and items"},
		{"neither", `{"name": "each", "command": "x", "for_each": {}}`, "spec.steps[1].for_each", "exactly one"},
		{"unknown step", `{"name": "each", "command": "x", "for_each": {"from": "nope.files"}}`,
			"spec.steps[1].for_each.from", `unknown step "nope"`},
		{"undeclared output", `{"name": "each", "command": "x", "for_each": {"from": "list.other"}}`,
			"spec.steps[1].for_each.from", `declares no output "other"`},
		{"malformed from", `{"name": "each", "command": "x", "for_each": {"from": "list"}}`,
			"spec.steps[1].for_each.from", `must be "<step>.<output>"`},
		{"bad as", `{"name": "each", "command": "x", "for_each": {"items": [1], "as": "1X"}}`,
			"spec.steps[1].for_each.as", "not a valid environment variable name"},
		{"reserved as", `{"name": "each", "command": "x", "for_each": {"items": [1], "as": "CAPSTAN_X"}}`,
			"spec.steps[1].for_each.as", "reserved"},
		{"as in env", `{"name": "each", "command": "x", "env": {"ITEM": "1"}, "for_each": {"items": [1]}}`,
			"spec.steps[1].for_each.as", "also set in env"},
		{"max_parallel 0", `{"name": "each", "command": "x", "for_each": {"items": [1], "max_parallel": 0}}`,
			"spec.steps[1].for_each.max_parallel", "between 1 and 10000"},
		{"replicas beside", `{"name": "each", "command": "x", "replicas": 2, "for_each": {"items": [1]}}`,
			"spec.steps[1].replicas", "takes no replicas"},
		{"on a suspend", `{"name": "each", "kind": "suspend", "for_each": {"items": [1]}}`,
			"spec.steps[1].for_each", "only a task or workflow step"},
		{"valid over a workflow", `{"name": "each", "kind": "workflow", "workflow": {"name": "leaf"}, "for_each": {"from": "list.files", "as": "path", "max_parallel": 2}}`, "", ""},
		{"workflow as not a param name", `{"name": "each", "kind": "workflow", "workflow": {"name": "leaf"}, "for_each": {"items": [1], "as": "a-b"}}`,
			"spec.steps[1].for_each.as", "names the child's param"},
		{"workflow as also a param", `{"name": "each", "kind": "workflow", "workflow": {"name": "leaf"}, "params": {"ITEM": 1}, "for_each": {"items": [1]}}`,
			"spec.steps[1].for_each.as", "also given in params"},
		{"serializable cache", `{"name": "each", "command": "x", "cache": {"serializable": true}, "for_each": {"items": [1]}}`,
			"spec.steps[1].cache.serializable", "cannot be serializable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := forEachSpec(t, `{"mode": "DAG", "steps": [`+list+`, `+tc.step+`]}`)
			errs := w.Validate("spec")
			if tc.field == "" {
				require.Empty(t, errs)
				return
			}
			require.NotEmpty(t, errs)
			found := false
			for _, e := range errs {
				if e.Field == tc.field && strings.Contains(e.Message, tc.msg) {
					found = true
				}
			}
			require.True(t, found, "want %s: %s; got %v", tc.field, tc.msg, errs)
		})
	}
	t.Run("too many items", func(t *testing.T) {
		t.Parallel()
		items := make([]any, domain.MaxForEachItems+1)
		w := forEachSpec(t, `{"steps": [{"name": "each", "command": "x", "for_each": {"items": []}}]}`)
		w.Steps[0].ForEach.Items = &items
		errs := w.Validate("spec")
		require.Len(t, errs, 1)
		require.Equal(t, "spec.steps[0].for_each.items", errs[0].Field)
	})
	t.Run("StepByStep from a later step", func(t *testing.T) {
		t.Parallel()
		w := forEachSpec(t, `{"steps": [{"name": "each", "command": "x", "for_each": {"from": "list.files"}}, `+list+`]}`)
		errs := w.Validate("spec")
		require.Len(t, errs, 1)
		require.Contains(t, errs[0].Message, "runs later")
	})
}

// TestForEachDependency checks that in DAG mode a for_each's from implies
// the dependency on its producer.
func TestForEachDependency(t *testing.T) {
	t.Parallel()
	w := forEachSpec(t, `{"mode": "DAG", "steps": [{"name": "list", "command": "ls", "outputs": ["files"]},
		{"name": "each", "command": "x", "for_each": {"from": "list.files"}}]}`)
	require.Equal(t, []string{"list"}, w.Dependencies(1))
}

// TestForEachItems checks the parsing of a from output: a JSON array of at
// most MaxForEachItems values, numbers as written, and the reasons for
// what is not one.
func TestForEachItems(t *testing.T) {
	t.Parallel()
	items, err := domain.ForEachItems("[\"a.go\", 12345678901234567890, {\"k\": [1, 2]}, null]\n")
	require.NoError(t, err)
	require.Equal(t, []string{"a.go", "12345678901234567890", `{"k":[1,2]}`, "null"}, domain.ItemValues(items))
	items, err = domain.ForEachItems("[]")
	require.NoError(t, err)
	require.Empty(t, items)
	for raw, msg := range map[string]string{
		`{"a": 1}`: "is not a JSON array", "": "is not a JSON array", "null": "is not a JSON array",
		"[1] [2]": "text follows", "[1,": "is not a JSON array",
		"[" + strings.Repeat("1,", domain.MaxForEachItems) + "1]": "has 10001 items; at most 10000",
	} {
		_, err := domain.ForEachItems(raw)
		require.ErrorContains(t, err, msg, "raw %q", raw)
	}
	require.Equal(t, "<b>&", domain.ItemValue("<b>&"))
	require.Equal(t, `["<b>"]`, domain.ItemValue([]any{"<b>"}))
}

// TestStepsWithParamsDropsItems checks that an action's step keeps no
// items (the run's spec does, StaticItems) and that the spec is unchanged.
func TestStepsWithParamsDropsItems(t *testing.T) {
	t.Parallel()
	w := forEachSpec(t, `{"steps": [{"name": "each", "command": "x", "for_each": {"items": ["a", "b"], "as": "F"}}]}`)
	steps := w.StepsWithParams(nil)
	require.Nil(t, steps[0].ForEach.Items)
	require.Equal(t, "F", steps[0].ForEach.EnvName())
	require.Equal(t, []any{"a", "b"}, w.StaticItems("each"))
	require.Len(t, *w.Steps[0].ForEach.Items, 2)
}

// TestItemAdmissions checks that a task key reads its item as ITEM.
func TestItemAdmissions(t *testing.T) {
	t.Parallel()
	step := domain.Step{Concurrency: &domain.StepConcurrency{Key: `"db-" + string(ITEM.n)`, MaxTasks: 1}}
	items, err := domain.ForEachItems(`[{"n": 1}, {"n": 2.5}]`)
	require.NoError(t, err)
	adm, errs := step.ItemAdmissions(nil, items, "step")
	require.Empty(t, errs)
	require.Equal(t, "db-1", *adm[0].ConcurrencyKey)
	require.Equal(t, "db-2.5", *adm[1].ConcurrencyKey)
	require.Equal(t, "for_each max_parallel 3: 3 running",
		domain.SlotWaitReason(domain.ForEachSlotKey("r", "each", 0), 3, 3))
}
