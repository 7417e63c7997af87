package domain

import (
	"fmt"
	"maps"
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

// Step kinds (KubeVela's step types Capstan has).
const (
	// KindTask runs `replicas` tasks with a plugin.
	KindTask = "task"
	// KindSuspend waits Duration, or for a resume when it has none.
	KindSuspend = "suspend"
	// KindApproval waits for an approve or a reject.
	KindApproval = "approval"
	// KindWorkflow runs a workflow template as a child run (Temporal's
	// child workflows, Argo's workflow-of-workflows).
	KindWorkflow = "workflow"
)

// KnownKinds lists the step kinds a spec may use.
var KnownKinds = []string{KindTask, KindSuspend, KindApproval, KindWorkflow}

// Failure policies (Step.OnFailure).
const (
	// OnFailureFail ends the run with the step's failure (the default).
	OnFailureFail = "fail"
	// OnFailureSuspend retries the failed step as a whole after KubeVela's
	// backoff, and pauses the run after the configured number of retries
	// (KubeVela's retry-then-suspend).
	OnFailureSuspend = "suspend"
)

// Conditions (Step.If) with a meaning of their own.
const (
	// IfAlways runs the step however its dependencies ended (a clean-up).
	IfAlways = "always"
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

// WorkflowSpec is what a run executes: a mode, the params it takes and a
// list of steps. It is the JSON stored in runs.spec and carried by the API.
type WorkflowSpec struct {
	Mode string `json:"mode,omitempty"`
	// Params declares the values each run of the workflow takes (at most
	// MaxParams); ResolveParams checks a run's against them.
	Params []Param `json:"params,omitempty"`
	Steps  []Step  `json:"steps"`
	// Timeout bounds the whole run from its creation, a Go duration; "" =
	// none. A run past it is TIMED_OUT through the abort path.
	Timeout string `json:"timeout,omitempty"`
	// Concurrency limits the runs of a key that hold a slot at a time
	// (DecideAdmission); nil = no limit.
	Concurrency *Concurrency `json:"concurrency,omitempty"`
	// FairnessKey is a CEL string expression over params: placement takes
	// turns between the keys of a project's runs within a priority band as
	// it does between projects; "" = the project's one key.
	FairnessKey string `json:"fairness_key,omitempty"`
	// Outputs are the run's outputs, each one of its steps' (at most
	// MaxOutputs): what a parent's workflow step that runs it as a child
	// gets as its own outputs.
	Outputs []SpecOutput `json:"outputs,omitempty"`
	// TTL is how long the run is kept once it has ended; nil = its
	// project's settings, else the server's defaults, decide.
	TTL *TTL `json:"ttl,omitempty"`
}

// Input is one value a step receives from an earlier step's output: From is
// "step.output", As the environment variable and the file name under
// $CAPSTAN_INPUTS_DIR (KubeVela's inputs).
type Input struct {
	From string `json:"from"`
	As   string `json:"as"`
}

// Producer returns the step and the output From names.
func (in Input) Producer() (step, output string) {
	step, output, _ = strings.Cut(in.From, ".")
	return step, output
}

// Step is one step of a workflow. A task step expands into Replicas tasks
// that each run Command with Plugin.
type Step struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind,omitempty"`
	DependsOn []string `json:"depends_on,omitempty"`
	Plugin    string   `json:"plugin,omitempty"`
	// Command is the shell plugin's script, run with /bin/sh -c.
	Command string `json:"command,omitempty"`
	// Args is the shell plugin's argv, executed directly without a shell
	// (instead of Command).
	Args []string `json:"args,omitempty"`
	// WaitExitCode is the shell plugin's exit status (1 to 255) that means
	// "not ready yet": the step waits (PhaseWaiting) and runs again after
	// KubeVela's waiting backoff instead of failing; nil = none.
	WaitExitCode *int `json:"wait_exit_code,omitempty"`
	// WaitTimeout bounds how long a task waits for its target (an http wait
	// code, the wait exit code), from its first wait, a Go duration; "" = no
	// bound but the step's timeout. Past it the task fails with code
	// WaitTimeout.
	WaitTimeout string `json:"wait_timeout,omitempty"`
	// HTTP is the http plugin's request.
	HTTP *HTTPSpec `json:"http,omitempty"`
	// Container is the container plugin's image and command.
	Container *ContainerSpec `json:"container,omitempty"`
	// Kubernetes is the kubernetes plugin's Pod.
	Kubernetes *KubernetesSpec `json:"kubernetes,omitempty"`
	// KillGrace is how long an aborted process has between SIGTERM and
	// SIGKILL, a Go duration; "" = DefaultKillGrace.
	KillGrace string `json:"kill_grace,omitempty"`
	// MaxSystemFailures is the system-failure budget (Flyte's
	// MaxSystemFailures); nil = the scheduler's default (3).
	MaxSystemFailures *int `json:"max_system_failures,omitempty"`
	// Cache makes the step discoverable (Flyte's catalog).
	Cache *CacheSpec        `json:"cache,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	// SecretEnv are environment variables like Env whose values the API
	// never returns (it shows SecretMask) and the logs never contain: an
	// executor gets them with its attempt. A name is in Env or here, not
	// both.
	SecretEnv         map[string]string `json:"secret_env,omitempty"`
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
	// Timeout bounds the step from its first start, retries included, a Go
	// duration; "" = none (KubeVela's step timeout). A step past it is
	// TIMED_OUT through the abort path.
	Timeout string `json:"timeout,omitempty"`
	// AttemptTimeout bounds each attempt's running time, a Go duration; "" =
	// none. A task past it is KILLED and its job TIMED_OUT.
	AttemptTimeout string `json:"attempt_timeout,omitempty"`
	// Duration is how long a suspend step waits, a Go duration; "" waits for
	// a resume.
	Duration string `json:"duration,omitempty"`
	// If is when the step runs: "" when every step it depends on SUCCEEDED
	// and no step failed; IfAlways whatever happened; else a CEL expression
	// over steps.<name>.phase, steps.<name>.outputs.<key>, run.failed and
	// params.<name>.
	If string `json:"if,omitempty"`
	// Outputs names the values each task writes to $CAPSTAN_OUTPUTS_DIR.
	Outputs []string `json:"outputs,omitempty"`
	// Inputs are earlier steps' outputs the step receives.
	Inputs []Input `json:"inputs,omitempty"`
	// ForEach fans the step out over a list: a task per item instead of
	// Replicas; nil = Replicas tasks.
	ForEach *ForEach `json:"for_each,omitempty"`
	// OnFailure is OnFailureFail (default) or OnFailureSuspend.
	OnFailure string `json:"on_failure,omitempty"`
	// Priority is the band: production (never preempted), interactive (the
	// default) or batch (preemptible).
	Priority string `json:"priority,omitempty"`
	// Resources is what each task needs on a worker.
	Resources *Resources `json:"resources,omitempty"`
	// Constraints select workers by label; all must hold.
	Constraints []Constraint `json:"constraints,omitempty"`
	// Coscheduled places all replicas together or none (a gang).
	Coscheduled bool `json:"coscheduled,omitempty"`
	// Network is NetworkNone to run each task with no network, or "" for
	// the executor's.
	Network string `json:"network,omitempty"`
	// Concurrency limits the step's tasks of a key that run at a time,
	// across runs; nil = no limit.
	Concurrency *StepConcurrency `json:"concurrency,omitempty"`
	// RateLimits are the project's rate limits each task takes tokens of
	// when it is placed.
	RateLimits []RateLimitUse `json:"rate_limits,omitempty"`
	// Workflow is a workflow step's template, run as its child; nil for
	// every other kind.
	Workflow *WorkflowRef `json:"workflow,omitempty"`
	// Params are a workflow step's values of its child's params (its
	// inputs give more, by their `as` names); nil for every other kind.
	Params map[string]any `json:"params,omitempty"`
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

// TimeoutDuration parses Timeout, the step's (0 when unset or invalid).
func (s Step) TimeoutDuration() time.Duration { return parseDuration(s.Timeout) }

// WaitTimeoutDuration parses WaitTimeout (0 when unset or invalid).
func (s Step) WaitTimeoutDuration() time.Duration { return parseDuration(s.WaitTimeout) }

// AttemptTimeoutDuration parses AttemptTimeout (0 when unset or invalid).
func (s Step) AttemptTimeoutDuration() time.Duration { return parseDuration(s.AttemptTimeout) }

// DurationValue parses a suspend step's Duration (0 when unset or invalid).
func (s Step) DurationValue() time.Duration { return parseDuration(s.Duration) }

// TimeoutDuration parses the run's Timeout (0 when unset or invalid).
func (w WorkflowSpec) TimeoutDuration() time.Duration { return parseDuration(w.Timeout) }

// Request returns what one task of the step asks of a worker.
func (s Step) Request() TaskRequest {
	r := TaskRequest{Priority: ParsePriority(s.Priority), Constraints: s.Constraints, Plugin: s.Plugin}
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

// MaxTasks returns the most tasks the step may have: MaxForEachItems for a
// for_each step, else MaxReplicas.
func (s Step) MaxTasks() int {
	if s.ForEach != nil {
		return MaxForEachItems
	}
	return MaxReplicas
}

// RetriesFailure returns MaxRetriesFailure, default DefaultMaxRetriesFailure.
func (s Step) RetriesFailure() int {
	if s.MaxRetriesFailure == nil {
		return DefaultMaxRetriesFailure
	}
	return *s.MaxRetriesFailure
}

// SystemFailuresAllowed returns MaxSystemFailures, or def (the scheduler's
// default, CAPSTAN_MAX_SYSTEM_FAILURES) when the step sets none: the system
// failures retried in place (Flyte's MaxSystemFailures).
func (s Step) SystemFailuresAllowed(def int) int {
	if s.MaxSystemFailures == nil {
		return def
	}
	return *s.MaxSystemFailures
}

// RunsProcess reports whether the step runs tasks with a plugin: a task
// step, not a wait (suspend, approval) nor a workflow step (a child run).
func (s Step) RunsProcess() bool {
	return s.Kind != KindSuspend && s.Kind != KindApproval && s.Kind != KindWorkflow
}

// Normalize fills defaults in place: mode StepByStep, param type string,
// kind task, plugin shell.
func (w *WorkflowSpec) Normalize() {
	if w.Mode == "" {
		w.Mode = ModeStepByStep
	}
	for i := range w.Params {
		if w.Params[i].Type == "" {
			w.Params[i].Type = ParamString
		}
	}
	for i := range w.Steps {
		if w.Steps[i].Kind == "" {
			w.Steps[i].Kind = KindTask
		}
		if w.Steps[i].Plugin == "" && w.Steps[i].RunsProcess() {
			w.Steps[i].Plugin = PluginShell
		}
		if w.Steps[i].Priority == "" {
			w.Steps[i].Priority = PriorityInteractive.String()
		}
	}
}

// FieldError names one offending field of a request by its JSON path, e.g.
// "spec.steps[1].plugin". It is the element of a problem document's "errors"
// (RFC 9457), hence the JSON names.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error renders "field: message".
func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// NamePattern is the form of project, domain, run, step and action names.
var NamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidName reports whether s is a valid name (1-63 of [a-z0-9-], starting
// and ending with a letter or digit).
func ValidName(s string) bool { return NamePattern.MatchString(s) }

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
		for _, d := range w.Dependencies(i) {
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

// SecretMask is what the API shows instead of a secret_env value.
const SecretMask = "***"

// Masked returns spec with every step's secret_env values replaced by
// SecretMask (the names stay), for answers that show a spec; spec itself
// is not changed.
func (spec WorkflowSpec) Masked() WorkflowSpec {
	steps := make([]Step, len(spec.Steps))
	for i, s := range spec.Steps {
		steps[i] = s.Masked()
	}
	spec.Steps = steps
	return spec
}

// Masked returns s with its secret_env values replaced by SecretMask (the
// names stay); s itself is not changed.
func (s Step) Masked() Step {
	if len(s.SecretEnv) > 0 {
		masked := make(map[string]string, len(s.SecretEnv))
		for k := range s.SecretEnv {
			masked[k] = SecretMask
		}
		s.SecretEnv = masked
	}
	return s
}

// AttemptEnv is the environment an attempt of the step gets: Env, then
// SecretEnv.
func (s Step) AttemptEnv() map[string]string {
	env := make(map[string]string, len(s.Env)+len(s.SecretEnv))
	maps.Copy(env, s.Env)
	maps.Copy(env, s.SecretEnv)
	return env
}

// MaskSecrets replaces every occurrence of each non-empty value of secrets
// in s with SecretMask, longest values first (so that a value containing
// another is masked whole). Output a process split across two chunks is
// masked only where a chunk holds the whole value.
func MaskSecrets(s string, secrets []string) string {
	vals := slices.DeleteFunc(slices.Clone(secrets), func(v string) bool { return v == "" })
	if len(vals) == 0 {
		return s
	}
	slices.SortFunc(vals, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(vals))
	for _, v := range vals {
		pairs = append(pairs, v, SecretMask)
	}
	return strings.NewReplacer(pairs...).Replace(s)
}
