package domain_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

func intp(n int) *int { return &n }

// shellStep is a valid step named name.
func shellStep(name string, deps ...string) domain.Step {
	return domain.Step{Name: name, Command: "echo " + name, DependsOn: deps}
}

// fields returns the Field of every error, in order.
func fields(errs []domain.FieldError) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Field
	}
	return out
}

// validate normalizes a copy of w and validates it under "spec".
func validate(w domain.WorkflowSpec) []domain.FieldError {
	w.Normalize()
	return w.Validate("spec")
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	w := domain.WorkflowSpec{Steps: []domain.Step{{Name: "a"}, {Name: "b", Kind: "approval", Plugin: "http"}}}
	w.Normalize()
	require.Equal(t, domain.ModeStepByStep, w.Mode, "In KubeVela v1.2+, the default running mode is StepByStep")
	require.Equal(t, domain.KindTask, w.Steps[0].Kind)
	require.Equal(t, domain.PluginShell, w.Steps[0].Plugin)
	require.Equal(t, "approval", w.Steps[1].Kind, "Normalize keeps an explicit kind")
	require.Equal(t, "http", w.Steps[1].Plugin, "Normalize keeps an explicit plugin")

	d := domain.WorkflowSpec{Mode: domain.ModeDAG}
	d.Normalize()
	require.Equal(t, domain.ModeDAG, d.Mode, "Normalize keeps an explicit mode")
}

func TestStepDefaults(t *testing.T) {
	t.Parallel()
	require.Equal(t, 1, domain.Step{}.ReplicaCount())
	require.Equal(t, 7, domain.Step{Replicas: intp(7)}.ReplicaCount())
	require.Equal(t, 0, domain.Step{Replicas: intp(0)}.ReplicaCount(), "explicit 0 is kept (and rejected by Validate)")
	require.Equal(t, domain.DefaultMaxRetriesFailure, domain.Step{}.RetriesFailure())
	require.Equal(t, 4, domain.Step{MaxRetriesFailure: intp(4)}.RetriesFailure())
}

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "0", "a0b", "a-b", "fan-in", "a00", strings.Repeat("x", 63), "a--b"} {
		require.True(t, domain.ValidName(ok), "%q", ok)
	}
	for _, bad := range []string{"", "A", "Build", "-a", "a-", "a_b", "a.b", "a b", "é", strings.Repeat("x", 64), "a\n"} {
		require.False(t, domain.ValidName(bad), "%q", bad)
	}
}

func TestFieldErrorError(t *testing.T) {
	t.Parallel()
	e := domain.FieldError{Field: "spec.steps[1].plugin", Message: `unknown plugin "docker"; known: shell`}
	require.Equal(t, `spec.steps[1].plugin: unknown plugin "docker"; known: shell`, e.Error())
}

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		w    domain.WorkflowSpec
	}{
		{"one shell step, defaults filled by Normalize", domain.WorkflowSpec{Steps: []domain.Step{shellStep("build")}}},
		{"StepByStep: steps in order", domain.WorkflowSpec{Mode: domain.ModeStepByStep, Steps: []domain.Step{shellStep("a"), shellStep("b"), shellStep("c")}}},
		{"DAG: diamond a -> (b, c) -> d", domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
			shellStep("d", "b", "c"), shellStep("b", "a"), shellStep("c", "a"), shellStep("a")}}},
		{"DAG: no dependencies at all", domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{shellStep("a"), shellStep("b")}}},
		{"limits at their maximum", domain.WorkflowSpec{Steps: []domain.Step{{
			Name: strings.Repeat("n", 63), Command: strings.Repeat("x", domain.MaxCommandBytes),
			Replicas: intp(domain.MaxReplicas), MaxRetriesFailure: intp(domain.MaxRetriesLimit),
			Env: map[string]string{"_OK": strings.Repeat("v", domain.MaxEnvValueBytes), "CAPSTAN": "not the reserved prefix", "capstan_x": "prefix is case-sensitive"},
		}}}},
		{"limits at their minimum", domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true", Replicas: intp(1), MaxRetriesFailure: intp(0)}}}},
		{"1000 steps", domain.WorkflowSpec{Steps: manySteps(domain.MaxSteps)}},
		{"noop: needs no command", domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Plugin: domain.PluginNoop, Replicas: intp(3)}}}},
		{"noop: a command is allowed (and ignored)", domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Plugin: domain.PluginNoop, Command: "x"}}}},
		{"network: none for a shell and a container step", domain.WorkflowSpec{Steps: []domain.Step{
			{Name: "a", Command: "x", Network: domain.NetworkNone},
			{Name: "b", Plugin: domain.PluginContainer, Container: &domain.ContainerSpec{Image: "alpine"}, Network: domain.NetworkNone}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Empty(t, validate(tc.w))
		})
	}
}

func manySteps(n int) []domain.Step {
	s := make([]domain.Step, n)
	for i := range s {
		s[i] = shellStep("s" + strconv.Itoa(i))
	}
	return s
}

func TestValidateRejects(t *testing.T) {
	t.Parallel()
	withStep := func(mode string, steps ...domain.Step) domain.WorkflowSpec {
		return domain.WorkflowSpec{Mode: mode, Steps: steps}
	}
	tests := []struct {
		name    string // the rule, from Capstan's spec rules (the spec's doc comments)
		w       domain.WorkflowSpec
		fields  []string
		message string // a substring of the (first) message
	}{
		{"unknown plugin: a spec that can never run fails at once with a clear reason",
			withStep("", shellStep("a"), domain.Step{Name: "b", Plugin: "docker", Command: "run"}),
			[]string{"spec.steps[1].plugin"}, `unknown plugin "docker"`},
		{"missing command: command is required for the shell plugin",
			withStep("", shellStep("a"), shellStep("b"), domain.Step{Name: "c"}),
			[]string{"spec.steps[2].command"}, "required"},
		{"blank command: whitespace only is missing",
			withStep("", domain.Step{Name: "a", Command: " \t\n"}),
			[]string{"spec.steps[0].command"}, "required"},
		{"command over MaxCommandBytes",
			withStep("", domain.Step{Name: "a", Command: strings.Repeat("x", domain.MaxCommandBytes+1)}),
			[]string{"spec.steps[0].command"}, "65537 bytes"},
		{"duplicate step names: the second one is named",
			withStep("", shellStep("a"), shellStep("b"), shellStep("a")),
			[]string{"spec.steps[2].name"}, "also steps[0]"},
		{"bad name: upper case", withStep("", shellStep("Build")), []string{"spec.steps[0].name"}, `"Build"`},
		{"bad name: empty", withStep("", shellStep("a"), shellStep("")), []string{"spec.steps[1].name"}, `""`},
		{"bad name: leading hyphen", withStep("", shellStep("-a")), []string{"spec.steps[0].name"}, "[a-z0-9-]"},
		{"bad name: trailing hyphen", withStep("", shellStep("a-")), []string{"spec.steps[0].name"}, "[a-z0-9-]"},
		{"bad name: underscore", withStep("", shellStep("a_b")), []string{"spec.steps[0].name"}, "[a-z0-9-]"},
		{"bad name: 64 characters", withStep("", shellStep(strings.Repeat("a", 64))), []string{"spec.steps[0].name"}, "1-63"},
		{"bad name: the root action is named a0", withStep("", shellStep("b"), shellStep(domain.RootActionName)), []string{"spec.steps[1].name"}, `not "a0"`},
		{"replicas out of range: 0", withStep("", domain.Step{Name: "a", Command: "x", Replicas: intp(0)}), []string{"spec.steps[0].replicas"}, "got 0"},
		{"replicas out of range: negative", withStep("", domain.Step{Name: "a", Command: "x", Replicas: intp(-3)}), []string{"spec.steps[0].replicas"}, "got -3"},
		{"replicas out of range: MaxReplicas+1", withStep("", shellStep("a"), domain.Step{Name: "b", Command: "x", Replicas: intp(domain.MaxReplicas + 1)}), []string{"spec.steps[1].replicas"}, "got 1001"},
		{"max_retries_failure out of range: negative", withStep("", domain.Step{Name: "a", Command: "x", MaxRetriesFailure: intp(-1)}), []string{"spec.steps[0].max_retries_failure"}, "got -1"},
		{"max_retries_failure out of range: MaxRetriesLimit+1", withStep("", domain.Step{Name: "a", Command: "x", MaxRetriesFailure: intp(domain.MaxRetriesLimit + 1)}), []string{"spec.steps[0].max_retries_failure"}, "got 101"},
		{"reserved CAPSTAN_ env names",
			withStep("", shellStep("a"), domain.Step{Name: "b", Command: "x", Env: map[string]string{"OK": "1", "CAPSTAN_RUN": "r"}}),
			[]string{"spec.steps[1].env.CAPSTAN_RUN"}, "reserved"},
		{"reserved CAPSTAN_ prefix alone",
			withStep("", domain.Step{Name: "a", Command: "x", Env: map[string]string{"CAPSTAN_": ""}}),
			[]string{"spec.steps[0].env.CAPSTAN_"}, "reserved"},
		{"invalid env names, sorted",
			withStep("", domain.Step{Name: "a", Command: "x", Env: map[string]string{"A-B": "1", "1X": "2", "": "3"}}),
			[]string{"spec.steps[0].env.", "spec.steps[0].env.1X", "spec.steps[0].env.A-B"}, "not a valid environment variable name"},
		{"env value over MaxEnvValueBytes",
			withStep("", domain.Step{Name: "a", Command: "x", Env: map[string]string{"BIG": strings.Repeat("v", domain.MaxEnvValueBytes+1)}}),
			[]string{"spec.steps[0].env.BIG"}, "at most 32768"},
		{"more than MaxEnvVars variables",
			withStep("", domain.Step{Name: "a", Command: "x", Env: manyEnv(domain.MaxEnvVars + 1)}),
			[]string{"spec.steps[0].env"}, "257 variables"},
		{"unknown kind", withStep("", domain.Step{Name: "a", Kind: "subworkflow", Command: "x"}), []string{"spec.steps[0].kind"}, `"subworkflow"`},
		{"mode must be StepByStep or DAG", domain.WorkflowSpec{Mode: "dag", Steps: []domain.Step{shellStep("a")}}, []string{"spec.mode"}, `got "dag"`},
		{"no steps", domain.WorkflowSpec{}, []string{"spec.steps"}, "got 0"},
		{"more than MaxSteps steps", domain.WorkflowSpec{Steps: manySteps(domain.MaxSteps + 1)}, []string{"spec.steps"}, "got 1001"},
		{"depends_on in StepByStep: only allowed in DAG mode",
			withStep(domain.ModeStepByStep, shellStep("a"), shellStep("b", "a")),
			[]string{"spec.steps[1].depends_on"}, "only allowed in DAG mode"},
		{"depends_on in StepByStep (mode defaulted by Normalize)",
			withStep("", shellStep("a", "b"), shellStep("b")),
			[]string{"spec.steps[0].depends_on"}, "DAG"},
		{"DAG: unknown dependency",
			withStep(domain.ModeDAG, shellStep("a"), shellStep("b", "a", "nope")),
			[]string{"spec.steps[1].depends_on[1]"}, `unknown step "nope"`},
		{"DAG: a step cannot depend on itself",
			withStep(domain.ModeDAG, shellStep("a"), shellStep("b", "b")),
			[]string{"spec.steps[1].depends_on[0]"}, "itself"},
		{"DAG: duplicate dependency",
			withStep(domain.ModeDAG, shellStep("a"), shellStep("b", "a", "a")),
			[]string{"spec.steps[1].depends_on[1]"}, `duplicate dependency "a"`},
		{"DAG: cycle of two",
			withStep(domain.ModeDAG, shellStep("x", "y"), shellStep("y", "x")),
			[]string{"spec.steps[0].depends_on"}, "dependency cycle: x -> y -> x"},
		{"network: none or absent",
			withStep("", domain.Step{Name: "a", Command: "x", Network: "host"}),
			[]string{"spec.steps[0].network"}, `must be "none" or absent; got "host"`},
		{"network: none cannot send an http step's request",
			withStep("", domain.Step{Name: "a", Plugin: domain.PluginHTTP, HTTP: &domain.HTTPSpec{URL: "http://x"}, Network: domain.NetworkNone}),
			[]string{"spec.steps[0].network"}, "cannot be none"},
		{"network: a suspend step runs nothing",
			withStep("", domain.Step{Name: "a", Kind: domain.KindSuspend, Network: domain.NetworkNone}),
			[]string{"spec.steps[0].network"}, "only a task step takes it"},
		{"several problems are all reported, each under its own field",
			withStep("", domain.Step{Name: "a", Plugin: "docker", Command: "x"}, domain.Step{Name: "B"}, domain.Step{Name: "c", Command: "x", Replicas: intp(0)}),
			[]string{"spec.steps[0].plugin", "spec.steps[1].name", "spec.steps[1].command", "spec.steps[2].replicas"}, "docker"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := validate(tc.w)
			require.Equal(t, tc.fields, fields(errs), "errors: %v", errs)
			require.Contains(t, errs[0].Message, tc.message)
		})
	}
}

func manyEnv(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("V%d", i)] = "x"
	}
	return m
}

// "cycle in depends_on with the cycle named": the field is the depends_on of
// a step on the cycle and the message names exactly the cycle's steps, not
// the step that merely hangs off it.
func TestValidateCycleNamed(t *testing.T) {
	t.Parallel()
	w := domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{
		shellStep("prep", "alpha"),  // 0: depends on the cycle, not on it
		shellStep("alpha", "gamma"), // 1
		shellStep("beta", "alpha"),  // 2
		shellStep("gamma", "beta"),  // 3
		shellStep("omega", "prep"),  // 4
	}}
	errs := validate(w)
	require.Len(t, errs, 1, "%v", errs)
	m := regexp.MustCompile(`^spec\.steps\[(\d+)\]\.depends_on$`).FindStringSubmatch(errs[0].Field)
	require.NotNil(t, m, "field %q", errs[0].Field)
	i, _ := strconv.Atoi(m[1])
	require.Contains(t, []string{"alpha", "beta", "gamma"}, w.Steps[i].Name, "the field names a step on the cycle")

	msg := errs[0].Message
	require.True(t, strings.HasPrefix(msg, "dependency cycle: "), msg)
	path := strings.Split(strings.TrimPrefix(msg, "dependency cycle: "), " -> ")
	require.Len(t, path, 4, "three steps and the first repeated: %q", msg)
	require.Equal(t, path[0], path[3], "the cycle closes: %q", msg)
	require.Equal(t, w.Steps[i].Name, path[0], "the field's step starts the named cycle")
	require.ElementsMatch(t, []string{"alpha", "beta", "gamma"}, path[:3])
	require.NotContains(t, msg, "prep")
	require.NotContains(t, msg, "omega")
	// Each arrow is a real depends_on edge.
	deps := map[string][]string{}
	for _, s := range w.Steps {
		deps[s.Name] = s.DependsOn
	}
	for k := 0; k < 3; k++ {
		require.Contains(t, deps[path[k]], path[k+1], "%s -> %s is not an edge", path[k], path[k+1])
	}
}

// The error paths are the JSON field names of the request: a spec decoded
// from JSON reports its errors under the keys the client sent.
func TestValidateFieldsAreJSONPaths(t *testing.T) {
	t.Parallel()
	body := `{"mode":"DAG","steps":[
		{"name":"a","command":"echo a"},
		{"name":"b","command":"echo b","depends_on":["a","zzz"]},
		{"name":"c","command":"echo c","max_retries_failure":-2,"replicas":0,"env":{"CAPSTAN_X":"1"}}
	]}`
	var w domain.WorkflowSpec
	require.NoError(t, json.Unmarshal([]byte(body), &w))
	errs := validate(w)
	require.Equal(t, []string{"spec.steps[2].replicas", "spec.steps[2].max_retries_failure", "spec.steps[2].env.CAPSTAN_X"}, fields(errs))

	// With step c fixed, the dependency problem is reported.
	w.Steps[2] = shellStep("c")
	errs = validate(w)
	require.Equal(t, []string{"spec.steps[1].depends_on[1]"}, fields(errs))

	// And a custom prefix.
	w.Normalize()
	errs = w.Validate("body.spec")
	require.Equal(t, []string{"body.spec.steps[1].depends_on[1]"}, fields(errs))
}

// Validate on a spec that was not normalized: kind, plugin and priority are empty,
// so all three are reported rather than silently defaulted.
func TestValidateWithoutNormalize(t *testing.T) {
	t.Parallel()
	w := domain.WorkflowSpec{Mode: domain.ModeStepByStep, Steps: []domain.Step{{Name: "a", Command: "x"}}}
	require.Equal(t, []string{"spec.steps[0].kind", "spec.steps[0].plugin", "spec.steps[0].priority"}, fields(w.Validate("spec")))
}

var stepIndex = regexp.MustCompile(`\.steps\[(\d+)\]`)

// FuzzValidate: Validate never panics on arbitrary JSON decoded into a
// WorkflowSpec (normalized or not), is deterministic, names only fields that
// exist, and an accepted spec has unique valid names, known dependencies and
// an acyclic graph.
func FuzzValidate(f *testing.F) {
	f.Add(`{"steps":[{"name":"a","command":"echo"}]}`)
	f.Add(`{"mode":"DAG","steps":[{"name":"a","command":"x"},{"name":"b","command":"x","depends_on":["a"]}]}`)
	f.Add(`{"mode":"DAG","steps":[{"name":"a","command":"x","depends_on":["b"]},{"name":"b","command":"x","depends_on":["a"]}]}`)
	f.Add(`{"mode":"DAG","steps":[{"name":"a","command":"x","depends_on":["a"]}]}`)
	f.Add(`{"mode":"DAG","steps":[{"name":"a","command":"x","depends_on":["c"]},{"name":"b","command":"x","depends_on":["a"]},{"name":"c","command":"x","depends_on":["b"]}]}`)
	f.Add(`{"mode":"DAG","steps":[{"name":"a","command":"x"},{"name":"a","command":"x","depends_on":["a"]}]}`)
	f.Add(`{"steps":[{"name":"a","command":"x","depends_on":["b"]},{"name":"b","command":"x"}]}`)
	f.Add(`{"steps":[{"name":"a0","plugin":"docker","replicas":0,"max_retries_failure":101,"env":{"CAPSTAN_X":"1","1":"2"}}]}`)
	f.Add(`{"mode":"x","steps":[]}`)
	f.Add(`{"steps":null}`)
	f.Add(`{"steps":[{}]}`)
	f.Add(`{"mode":"DAG","steps":[{"name":"","depends_on":[""]},{"name":"b","command":"x","depends_on":[""]}]}`)
	f.Add(`null`)
	f.Add(`{"params":[{"name":"n","type":"number","default":3},{"name":"n"},{"name":"CAPSTAN_X","type":"int"}],"steps":[{"name":"a","command":"x","env":{"n":"1"},"if":"params.n > 2 && params.m"}]}`)
	f.Add(`{"params":[{"name":"cfg","type":"json","default":{"a":[1]}},{"name":"ok","type":"boolean","required":true,"default":"x"}],"steps":[{"name":"a","command":"x"}]}`)

	f.Fuzz(func(t *testing.T, body string) {
		var w domain.WorkflowSpec
		if err := json.Unmarshal([]byte(body), &w); err != nil {
			return
		}
		if len(w.Steps) > 2*domain.MaxSteps {
			return
		}
		_ = w.Validate("spec") // not normalized: must not panic

		w.Normalize()
		errs := w.Validate("spec")
		require.Equal(t, errs, w.Validate("spec"), "Validate is deterministic")
		for _, e := range errs {
			require.True(t, strings.HasPrefix(e.Field, "spec."), "field %q lacks the prefix", e.Field)
			require.NotEmpty(t, e.Message)
			if m := stepIndex.FindStringSubmatch(e.Field); m != nil {
				i, err := strconv.Atoi(m[1])
				require.NoError(t, err)
				require.Less(t, i, len(w.Steps), "field %q names a step that does not exist", e.Field)
			}
		}
		if len(errs) > 0 {
			return
		}

		// Accepted.
		require.Contains(t, []string{domain.ModeStepByStep, domain.ModeDAG}, w.Mode)
		for _, p := range w.Params {
			require.Contains(t, domain.KnownParamTypes, p.Type)
			_, errs := domain.ResolveParams([]domain.Param{p}, nil, "params")
			require.Equal(t, p.Required, len(errs) > 0, "an accepted param resolves without a value unless required: %v", errs)
		}
		require.NotEmpty(t, w.Steps)
		require.LessOrEqual(t, len(w.Steps), domain.MaxSteps)
		index := map[string]int{}
		for i, s := range w.Steps {
			require.True(t, domain.ValidName(s.Name), "accepted name %q", s.Name)
			require.NotEqual(t, domain.RootActionName, s.Name)
			_, dup := index[s.Name]
			require.False(t, dup, "accepted duplicate name %q", s.Name)
			index[s.Name] = i
			require.Contains(t, domain.KnownPlugins, s.Plugin)
			require.NotEmpty(t, strings.TrimSpace(s.Command))
			require.GreaterOrEqual(t, s.ReplicaCount(), 1)
			require.LessOrEqual(t, s.ReplicaCount(), domain.MaxReplicas)
			require.GreaterOrEqual(t, s.RetriesFailure(), 0)
			require.LessOrEqual(t, s.RetriesFailure(), domain.MaxRetriesLimit)
			for k := range s.Env {
				require.False(t, strings.HasPrefix(k, domain.ReservedEnvPrefix), "accepted reserved env %q", k)
			}
			if w.Mode == domain.ModeStepByStep {
				require.Empty(t, s.DependsOn, "accepted depends_on in StepByStep")
			}
		}
		// Every dependency exists, is not the step itself, and the graph is
		// acyclic (Kahn's algorithm consumes every step).
		indeg := make([]int, len(w.Steps))
		users := make([][]int, len(w.Steps))
		for i, s := range w.Steps {
			seen := map[string]bool{}
			for _, d := range s.DependsOn {
				j, ok := index[d]
				require.True(t, ok, "accepted unknown dependency %q", d)
				require.NotEqual(t, i, j, "accepted self-dependency")
				require.False(t, seen[d], "accepted duplicate dependency %q", d)
				seen[d] = true
				indeg[i]++
				users[j] = append(users[j], i)
			}
		}
		var queue []int
		for i, n := range indeg {
			if n == 0 {
				queue = append(queue, i)
			}
		}
		done := 0
		for len(queue) > 0 {
			i := queue[0]
			queue = queue[1:]
			done++
			for _, u := range users[i] {
				if indeg[u]--; indeg[u] == 0 {
					queue = append(queue, u)
				}
			}
		}
		require.Equal(t, len(w.Steps), done, "accepted a spec whose depends_on graph has a cycle")
	})
}

// Validating a spec whose steps set no condition compiles none: the api
// validates every run's spec, and one CEL compile of an empty expression
// (which fails, so is never cached) made about 110 allocations on its own.
func TestValidateCompilesNoAbsentCondition(t *testing.T) {
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	allocs := testing.AllocsPerRun(20, func() { _ = spec.Validate("spec") })
	require.Less(t, allocs, 80.0)
}
