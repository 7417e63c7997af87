package domain

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Validate checks a normalized spec and returns the problems found, each
// naming its field under prefix (e.g. "spec"): first every problem of the
// params and the steps themselves, then, once those are clean, of the DAG's
// depends_on (unknown steps, self and duplicate dependencies, cycles). An
// empty result means valid.
func (w WorkflowSpec) Validate(prefix string) []FieldError {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: prefix + field, Message: fmt.Sprintf(format, a...)})
	}
	if w.Mode != ModeStepByStep && w.Mode != ModeDAG {
		add(".mode", "must be %q or %q, got %q", ModeStepByStep, ModeDAG, w.Mode)
	}
	if len(w.Steps) == 0 || len(w.Steps) > MaxSteps {
		add(".steps", "must hold 1 to %d steps, got %d", MaxSteps, len(w.Steps))
	}
	for _, e := range validateParams(w.Params) {
		add(e.Field, "%s", e.Message)
	}
	seen := make(map[string]int, len(w.Steps))
	for i, s := range w.Steps {
		at := fmt.Sprintf(".steps[%d]", i)
		if !ValidName(s.Name) || s.Name == RootActionName {
			add(at+".name", "must be 1-63 characters of [a-z0-9-] starting and ending with a letter or digit, and not %q; got %q", RootActionName, s.Name)
		} else if j, dup := seen[s.Name]; dup {
			add(at+".name", "duplicate step name %q (also steps[%d])", s.Name, j)
		} else {
			seen[s.Name] = i
		}
		for _, e := range s.validate(w.Mode) {
			add(at+e.Field, "%s", e.Message)
		}
		for _, e := range s.paramClashes(w.Params) {
			add(at+e.Field, "%s", e.Message)
		}
	}
	if msg := durationProblem(w.Timeout); msg != "" {
		add(".timeout", "%s", msg)
	}
	errs = append(errs, w.TTL.Validate(prefix+".ttl")...)
	for _, e := range w.validateConcurrency() {
		add(e.Field, "%s", e.Message)
	}
	if len(errs) > 0 {
		return errs
	}
	for _, e := range w.validateOutputs(seen) {
		add(e.Field, "%s", e.Message)
	}
	for _, e := range w.validateFlow(seen) {
		add(e.Field, "%s", e.Message)
	}
	if len(errs) == 0 && w.Mode == ModeDAG {
		for _, e := range w.validateDeps(seen) {
			add(e.Field, "%s", e.Message)
		}
	}
	return errs
}

// durationProblem says what is wrong with an optional duration field, or "".
func durationProblem(v string) string {
	if d, err := time.ParseDuration(v); v != "" && (err != nil || d < 0 || d > MaxDuration) {
		return fmt.Sprintf("must be a duration such as \"30s\" or \"5m\", from 0 to %s; got %q", MaxDuration, v)
	}
	return ""
}

func (s Step) validate(mode string) []FieldError {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	known := slices.Contains(KnownKinds, s.Kind)
	if !known {
		add(".kind", "unknown step kind %q; known: %s", s.Kind, strings.Join(KnownKinds, ", "))
	}
	switch {
	case known && s.Kind == KindWorkflow:
		errs = append(errs, s.validateWorkflowStep()...)
	case known && s.Kind != KindTask:
		errs = append(errs, s.validateWait()...)
	default:
		errs = append(errs, s.PluginSpec().Validate()...)
		errs = append(errs, s.validateNetwork()...)
		if s.WaitTimeout != "" && !s.PluginSpec().Waits() {
			add(".wait_timeout", "bounds a wait: give http.wait_codes or wait_exit_code with it")
		}
		if s.Cache != nil {
			errs = append(errs, s.Cache.validate(s)...)
		}
	}
	if s.Kind != KindWorkflow {
		errs = append(errs, s.workflowOnly()...)
	}
	errs = append(errs, s.validateData()...)
	errs = append(errs, s.validateForEach()...)
	if len(s.Command) > MaxCommandBytes {
		add(".command", "is %d bytes; at most %d", len(s.Command), MaxCommandBytes)
	}
	if msg := durationProblem(s.KillGrace); msg != "" {
		add(".kill_grace", "%s", msg)
	}
	if s.MaxSystemFailures != nil && (*s.MaxSystemFailures < 0 || *s.MaxSystemFailures > MaxRetriesLimit) {
		add(".max_system_failures", "must be between 0 and %d, got %d", MaxRetriesLimit, *s.MaxSystemFailures)
	}
	if n := s.ReplicaCount(); n < 1 || n > MaxReplicas {
		add(".replicas", "must be between 1 and %d, got %d", MaxReplicas, n)
	}
	if n := s.RetriesFailure(); n < 0 || n > MaxRetriesLimit {
		add(".max_retries_failure", "must be between 0 and %d, got %d", MaxRetriesLimit, n)
	}
	if n := s.RetriesPreemption(); n < 0 || n > 10000 {
		add(".max_retries_preemption", "must be between 0 and 10000, got %d", n)
	}
	if n, most := s.TaskFailuresAllowed(), s.MaxTasks(); n < 0 || n > most {
		add(".max_task_failures", "must be between 0 and %d, got %d", most, n)
	}
	if mode == ModeStepByStep && len(s.DependsOn) > 0 {
		add(".depends_on", "is only allowed in DAG mode (StepByStep runs steps in order)")
	}
	errs = append(errs, s.validateAdmission()...)
	return append(append(errs, s.validateScheduling()...), s.validateEnv()...)
}

// validateScheduling checks a step's timeouts, band, resources and
// constraints.
func (s Step) validateScheduling() []FieldError {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	for field, v := range map[string]string{".scheduling_timeout": s.SchedulingTimeout, ".timeout": s.Timeout,
		".attempt_timeout": s.AttemptTimeout, ".wait_timeout": s.WaitTimeout} {
		if msg := durationProblem(v); msg != "" {
			add(field, "%s", msg)
		}
	}
	if _, ok := priorityNames[s.Priority]; !ok {
		add(".priority", "must be production, interactive or batch; got %q", s.Priority)
	}
	if s.Resources != nil && (s.Resources.CPUMillis < 0 || s.Resources.MemoryBytes < 0) {
		add(".resources", "cpu_millis and memory_bytes must not be negative")
	}
	for i, c := range s.Constraints {
		if msg := c.validate(); msg != "" {
			add(fmt.Sprintf(".constraints[%d]", i), "%s", msg)
		}
	}
	return errs
}

// validateEnv checks a step's environment variables.
func (s Step) validateEnv() []FieldError {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	if n := len(s.Env) + len(s.SecretEnv); n > MaxEnvVars {
		add(".env", "has %d variables with secret_env; at most %d", n, MaxEnvVars)
	}
	for field, env := range map[string]map[string]string{".env": s.Env, ".secret_env": s.SecretEnv} {
		for _, k := range slices.Sorted(maps.Keys(env)) {
			switch {
			case !envName.MatchString(k):
				add(field+"."+k, "is not a valid environment variable name")
			case strings.HasPrefix(k, ReservedEnvPrefix):
				add(field+"."+k, "names starting with %s are reserved", ReservedEnvPrefix)
			case len(env[k]) > MaxEnvValueBytes:
				add(field+"."+k, "value is %d bytes; at most %d", len(env[k]), MaxEnvValueBytes)
			case field == ".secret_env" && hasKey(s.Env, k):
				add(field+"."+k, "is also in env")
			}
		}
	}
	slices.SortFunc(errs, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
	return errs
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}
