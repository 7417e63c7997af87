package domain

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// MaxOutputs is how many outputs a step may declare.
const MaxOutputs = 64

// outputName is the form of an output's name: a file name under
// $CAPSTAN_OUTPUTS_DIR and a key a condition reads as
// steps.<step>.outputs.<name>.
var outputName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// validateWait checks a suspend or approval step: it runs no plugin, so it
// takes none of a task's fields; only a suspend takes a duration.
func (s Step) validateWait() []FieldError {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	taskOnly := map[string]bool{".plugin": s.Plugin != "", ".command": s.Command != "", ".env": len(s.Env) > 0,
		".secret_env": len(s.SecretEnv) > 0,
		".replicas":   s.Replicas != nil && *s.Replicas != 1, ".outputs": len(s.Outputs) > 0,
		".inputs": len(s.Inputs) > 0, ".on_failure": s.OnFailure != "" && s.OnFailure != OnFailureFail,
		".attempt_timeout": s.AttemptTimeout != "", ".coscheduled": s.Coscheduled, ".args": len(s.Args) > 0,
		".http": s.HTTP != nil, ".container": s.Container != nil, ".kubernetes": s.Kubernetes != nil, ".cache": s.Cache != nil,
		".kill_grace": s.KillGrace != "", ".max_system_failures": s.MaxSystemFailures != nil, ".network": s.Network != "",
		".wait_exit_code": s.WaitExitCode != nil, ".wait_timeout": s.WaitTimeout != ""}
	for _, field := range slices.Sorted(maps.Keys(taskOnly)) {
		if taskOnly[field] {
			add(field, "only a task step takes it; this step is a %s", s.Kind)
		}
	}
	if s.Kind != KindSuspend && s.Duration != "" {
		add(".duration", "only a suspend step takes it")
	}
	if msg := durationProblem(s.Duration); msg != "" {
		add(".duration", "%s", msg)
	}
	return errs
}

// validateData checks a step's outputs, inputs, failure policy and the form
// of its condition (what it may refer to is checked with the whole spec).
func (s Step) validateData() []FieldError {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	if len(s.Outputs) > MaxOutputs {
		add(".outputs", "has %d names; at most %d", len(s.Outputs), MaxOutputs)
	}
	if len(s.Outputs) > 0 && s.Plugin == PluginNoop {
		add(".outputs", "the noop plugin writes no outputs")
	}
	for i, o := range s.Outputs {
		switch {
		case !outputName.MatchString(o):
			add(fmt.Sprintf(".outputs[%d]", i), "must be 1-63 characters of [A-Za-z0-9_], not starting with a digit; got %q", o)
		case slices.Index(s.Outputs, o) < i:
			add(fmt.Sprintf(".outputs[%d]", i), "duplicate output %q", o)
		}
	}
	for i, in := range s.Inputs {
		errs = append(errs, in.validate(fmt.Sprintf(".inputs[%d]", i), s, i)...)
	}
	if s.OnFailure != "" && s.OnFailure != OnFailureFail && s.OnFailure != OnFailureSuspend {
		add(".on_failure", "must be %q or %q; got %q", OnFailureFail, OnFailureSuspend, s.OnFailure)
	}
	if s.If != "" && s.If != IfAlways {
		if _, err := CompileCondition(s.If); err != nil {
			add(".if", "must be %q or a CEL expression over steps.<name>.phase, steps.<name>.outputs.<key>, run.failed and params.<name>: %s",
				IfAlways, oneLine(err.Error()))
		}
	}
	return errs
}

// validate checks the form of input i of step s.
func (in Input) validate(at string, s Step, i int) []FieldError {
	var errs []FieldError
	step, output := in.Producer()
	if !ValidName(step) || !outputName.MatchString(output) {
		errs = append(errs, FieldError{at + ".from", fmt.Sprintf("must be \"<step>.<output>\"; got %q", in.From)})
	}
	switch {
	case !envName.MatchString(in.As):
		errs = append(errs, FieldError{at + ".as", fmt.Sprintf("is not a valid environment variable name: %q", in.As)})
	case strings.HasPrefix(in.As, ReservedEnvPrefix):
		errs = append(errs, FieldError{at + ".as", "names starting with " + ReservedEnvPrefix + " are reserved"})
	case slices.IndexFunc(s.Inputs, func(o Input) bool { return o.As == in.As }) < i:
		errs = append(errs, FieldError{at + ".as", fmt.Sprintf("duplicate input name %q", in.As)})
	case s.Env[in.As] != "":
		errs = append(errs, FieldError{at + ".as", fmt.Sprintf("%q is also set in env", in.As)})
	}
	return errs
}

// validateFlow checks what steps refer to across the spec: an input's
// producer, and a for_each's, must be another step that declares the
// output (in StepByStep mode, an earlier one), and a condition may read only other steps (in
// StepByStep mode, earlier ones) and declared params.
func (w WorkflowSpec) validateFlow(index map[string]int) []FieldError {
	var errs []FieldError
	refer := func(field string, i int, step, what string) {
		j, ok := index[step]
		switch {
		case !ok:
			errs = append(errs, FieldError{field, fmt.Sprintf("%s unknown step %q", what, step)})
		case j == i:
			errs = append(errs, FieldError{field, what + " its own step"})
		case w.Mode != ModeDAG && j > i:
			errs = append(errs, FieldError{field, fmt.Sprintf("%s step %q, which runs later (StepByStep)", what, step)})
		}
	}
	for i, s := range w.Steps {
		at := fmt.Sprintf(".steps[%d]", i)
		for k, in := range s.Inputs {
			step, output := in.Producer()
			field := fmt.Sprintf("%s.inputs[%d].from", at, k)
			refer(field, i, step, "names")
			if j, ok := index[step]; ok && j != i && !slices.Contains(w.Steps[j].Outputs, output) {
				errs = append(errs, FieldError{field, fmt.Sprintf("step %q declares no output %q", step, output)})
			}
		}
		if f := s.ForEach; f != nil && f.From != "" {
			step, output := f.Producer()
			field := at + ".for_each.from"
			refer(field, i, step, "names")
			if j, ok := index[step]; ok && j != i && !slices.Contains(w.Steps[j].Outputs, output) {
				errs = append(errs, FieldError{field, fmt.Sprintf("step %q declares no output %q", step, output)})
			}
		}
		if s.If == "" || s.If == IfAlways {
			continue
		}
		if c, err := CompileCondition(s.If); err == nil {
			for _, step := range c.Steps {
				refer(at+".if", i, step, "reads")
			}
			for _, name := range c.Params {
				if !slices.ContainsFunc(w.Params, func(p Param) bool { return p.Name == name }) {
					errs = append(errs, FieldError{at + ".if", fmt.Sprintf("reads unknown param %q", name)})
				}
			}
		}
	}
	return errs
}

// oneLine joins a multi-line message (CEL's errors carry a caret line).
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
