package domain

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Workflow modes (KubeVela's).
const (
	// ModeStepByStep runs steps one after another in spec order (the default).
	ModeStepByStep = "StepByStep"
	// ModeDAG runs every step whose depends_on have all succeeded, concurrently.
	ModeDAG = "DAG"
)

// Step kinds.
const (
	// KindTask runs `replicas` tasks with a plugin.
	KindTask = "task"
)

// Plugins the executor ships.
const (
	// PluginShell runs Step.Command with /bin/sh -c in its own process group.
	PluginShell = "shell"
	// PluginNoop starts no process: the executor reports the attempt RUNNING
	// and then SUCCEEDED at once. It needs no command (one given is
	// ignored); it tests a workflow's shape and measures the control plane.
	PluginNoop = "noop"
)

// Limits on a workflow spec.
const (
	MaxSteps          = 1000
	MaxReplicas       = 1000
	MaxRetriesLimit   = 100
	MaxCommandBytes   = 64 << 10
	MaxEnvVars        = 256
	MaxEnvValueBytes  = 32 << 10
	ReservedEnvPrefix = "CAPSTAN_"
	// MaxDuration bounds timeouts: 30 days.
	MaxDuration        = 30 * 24 * time.Hour
	DefaultAbortReason = "User requested abort"
)

// KnownPlugins lists the plugin names a spec may use.
var KnownPlugins = []string{PluginShell, PluginNoop}

// WorkflowSpec is what a run executes: a mode and a list of steps. It is the
// JSON stored in runs.spec and carried by the API.
type WorkflowSpec struct {
	Mode  string `json:"mode,omitempty"`
	Steps []Step `json:"steps"`
}

// Step is one step of a workflow. A task step expands into Replicas tasks
// that each run Command with Plugin.
type Step struct {
	Name              string            `json:"name"`
	Kind              string            `json:"kind,omitempty"`
	DependsOn         []string          `json:"depends_on,omitempty"`
	Plugin            string            `json:"plugin,omitempty"`
	Command           string            `json:"command,omitempty"`
	Env               map[string]string `json:"env,omitempty"`
	Replicas          *int              `json:"replicas,omitempty"`
	MaxRetriesFailure *int              `json:"max_retries_failure,omitempty"`
	// MaxRetriesPreemption is the preemption budget (WORKER_FAILED,
	// PREEMPTED). Default 100.
	MaxRetriesPreemption *int `json:"max_retries_preemption,omitempty"`
	// MaxTaskFailures is how many FAILED tasks the job tolerates. Default 0.
	MaxTaskFailures *int `json:"max_task_failures,omitempty"`
	// SchedulingTimeout is how long a task may wait to be placed before it is
	// UNSCHEDULABLE, a Go duration ("30s", "5m"); "" or "0s" waits forever.
	SchedulingTimeout string `json:"scheduling_timeout,omitempty"`
	// Timeout bounds each task's running time, a Go duration; "" = none. A
	// task past it is KILLED and its job TIMED_OUT.
	Timeout string `json:"timeout,omitempty"`
	// Priority is the band: production (never preempted), interactive (the
	// default) or batch (preemptible).
	Priority string `json:"priority,omitempty"`
	// Resources is what each task needs on a worker.
	Resources *Resources `json:"resources,omitempty"`
	// Constraints select workers by label; all must hold.
	Constraints []Constraint `json:"constraints,omitempty"`
	// Coscheduled places all replicas together or none (a gang).
	Coscheduled bool `json:"coscheduled,omitempty"`
}

// RetriesPreemption returns MaxRetriesPreemption, default
// DefaultMaxRetriesPreemption.
func (s Step) RetriesPreemption() int {
	if s.MaxRetriesPreemption == nil {
		return DefaultMaxRetriesPreemption
	}
	return *s.MaxRetriesPreemption
}

// TaskFailuresAllowed returns MaxTaskFailures, default 0.
func (s Step) TaskFailuresAllowed() int {
	if s.MaxTaskFailures == nil {
		return 0
	}
	return *s.MaxTaskFailures
}

// SchedulingTimeoutDuration parses SchedulingTimeout (0 when unset or invalid).
func (s Step) SchedulingTimeoutDuration() time.Duration { return parseDuration(s.SchedulingTimeout) }

// TimeoutDuration parses Timeout (0 when unset or invalid).
func (s Step) TimeoutDuration() time.Duration { return parseDuration(s.Timeout) }

// Request returns what one task of the step asks of a worker.
func (s Step) Request() TaskRequest {
	r := TaskRequest{Priority: ParsePriority(s.Priority), Constraints: s.Constraints}
	if s.Resources != nil {
		r.Resources = *s.Resources
	}
	return r
}

func parseDuration(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// ReplicaCount returns Replicas, default 1.
func (s Step) ReplicaCount() int {
	if s.Replicas == nil {
		return 1
	}
	return *s.Replicas
}

// RetriesFailure returns MaxRetriesFailure, default DefaultMaxRetriesFailure.
func (s Step) RetriesFailure() int {
	if s.MaxRetriesFailure == nil {
		return DefaultMaxRetriesFailure
	}
	return *s.MaxRetriesFailure
}

// Normalize fills defaults in place: mode StepByStep, kind task, plugin shell.
func (w *WorkflowSpec) Normalize() {
	if w.Mode == "" {
		w.Mode = ModeStepByStep
	}
	for i := range w.Steps {
		if w.Steps[i].Kind == "" {
			w.Steps[i].Kind = KindTask
		}
		if w.Steps[i].Plugin == "" {
			w.Steps[i].Plugin = PluginShell
		}
		if w.Steps[i].Priority == "" {
			w.Steps[i].Priority = PriorityInteractive.String()
		}
	}
}

// FieldError names one offending field of a request by its JSON path, e.g.
// "spec.steps[1].plugin".
type FieldError struct {
	Field   string
	Message string
}

// Error renders "field: message".
func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// NamePattern is the form of project, domain, run, step and action names.
var NamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidName reports whether s is a valid name (1-63 of [a-z0-9-], starting
// and ending with a letter or digit).
func ValidName(s string) bool { return NamePattern.MatchString(s) }

// Validate checks a normalized spec and returns the problems found, each
// naming its field under prefix (e.g. "spec"): first every problem of the
// steps themselves, then, once those are clean, of the DAG's depends_on
// (unknown steps, self and duplicate dependencies, cycles). An empty result
// means valid.
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
	}
	if len(errs) == 0 && w.Mode == ModeDAG {
		for _, e := range w.validateDeps(seen) {
			add(e.Field, "%s", e.Message)
		}
	}
	return errs
}

func (s Step) validate(mode string) []FieldError {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	if s.Kind != KindTask {
		add(".kind", "unknown step kind %q; known: %s", s.Kind, KindTask)
	}
	if !slices.Contains(KnownPlugins, s.Plugin) {
		add(".plugin", "unknown plugin %q; known: %s", s.Plugin, strings.Join(KnownPlugins, ", "))
	}
	if s.Plugin == PluginShell && strings.TrimSpace(s.Command) == "" {
		add(".command", "is required for the shell plugin")
	}
	if len(s.Command) > MaxCommandBytes {
		add(".command", "is %d bytes; at most %d", len(s.Command), MaxCommandBytes)
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
	if n := s.TaskFailuresAllowed(); n < 0 || n > MaxReplicas {
		add(".max_task_failures", "must be between 0 and %d, got %d", MaxReplicas, n)
	}
	for field, v := range map[string]string{".scheduling_timeout": s.SchedulingTimeout, ".timeout": s.Timeout} {
		if d, err := time.ParseDuration(v); v != "" && (err != nil || d < 0 || d > MaxDuration) {
			add(field, "must be a duration such as \"30s\" or \"5m\", from 0 to %s; got %q", MaxDuration, v)
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
	if len(s.Env) > MaxEnvVars {
		add(".env", "has %d variables; at most %d", len(s.Env), MaxEnvVars)
	}
	for _, k := range sortedKeys(s.Env) {
		switch {
		case !envName.MatchString(k):
			add(".env."+k, "is not a valid environment variable name")
		case strings.HasPrefix(k, ReservedEnvPrefix):
			add(".env."+k, "names starting with %s are reserved", ReservedEnvPrefix)
		case len(s.Env[k]) > MaxEnvValueBytes:
			add(".env."+k, "value is %d bytes; at most %d", len(s.Env[k]), MaxEnvValueBytes)
		}
	}
	if mode == ModeStepByStep && len(s.DependsOn) > 0 {
		add(".depends_on", "is only allowed in DAG mode (StepByStep runs steps in order)")
	}
	return errs
}

// validateDeps checks that depends_on names existing steps, once each, and
// that the graph has no cycle.
func (w WorkflowSpec) validateDeps(index map[string]int) []FieldError {
	var errs []FieldError
	for i, s := range w.Steps {
		seen := map[string]bool{}
		for j, d := range s.DependsOn {
			field := fmt.Sprintf(".steps[%d].depends_on[%d]", i, j)
			switch _, ok := index[d]; {
			case !ok:
				errs = append(errs, FieldError{field, fmt.Sprintf("unknown step %q", d)})
			case d == s.Name:
				errs = append(errs, FieldError{field, "a step cannot depend on itself"})
			case seen[d]:
				errs = append(errs, FieldError{field, fmt.Sprintf("duplicate dependency %q", d)})
			}
			seen[d] = true
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if cycle := w.findCycle(index); cycle != nil {
		i := index[cycle[0]]
		errs = append(errs, FieldError{fmt.Sprintf(".steps[%d].depends_on", i),
			"dependency cycle: " + strings.Join(cycle, " -> ")})
	}
	return errs
}

// findCycle returns one cycle of depends_on as step names (first repeated at
// the end), or nil.
func (w WorkflowSpec) findCycle(index map[string]int) []string {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(w.Steps))
	var stack []string
	var visit func(i int) []string
	visit = func(i int) []string {
		color[i] = grey
		stack = append(stack, w.Steps[i].Name)
		for _, d := range w.Steps[i].DependsOn {
			j := index[d]
			if color[j] == grey {
				start := slices.Index(stack, d)
				return append(slices.Clone(stack[start:]), d)
			}
			if color[j] == white {
				if c := visit(j); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
		return nil
	}
	for i := range w.Steps {
		if color[i] == white {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
