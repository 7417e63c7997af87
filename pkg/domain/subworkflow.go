package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Sub-workflows (Temporal's child workflows, Argo's workflow-of-workflows):
// a step of kind workflow runs a workflow template of its run's project and
// domain as a child run, whose phase its own follows and whose declared
// outputs become its outputs.

// MaxDepth is how deep runs nest: a run created through the API has depth
// 0, a child its parent's + 1, at most MaxDepth.
const MaxDepth = 10

// WorkflowRef names a workflow template of the run's project and domain
// and one of its versions; Version 0 (absent) is the latest when the step
// starts. The JSON names are fixed for clients.
type WorkflowRef struct {
	Name    string `json:"name"`
	Version int    `json:"version,omitempty"`
}

// SpecOutput is one output of a run: the value of output From
// ("step.output") of one of its steps, named Name.
type SpecOutput struct {
	Name string `json:"name"`
	From string `json:"from"`
}

// Producer returns the step and the output From names.
func (o SpecOutput) Producer() (step, output string) { return Input{From: o.From}.Producer() }

// validateWorkflowStep checks a workflow step: it names a template and
// runs no plugin, so it takes none of a task's process fields. Its params
// are checked against the template's when the template is known
// (CheckSubWorkflows).
func (s Step) validateWorkflowStep() []FieldError {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	switch {
	case s.Workflow == nil:
		add(".workflow", "a workflow step names the template it runs: {name, version?}")
	case !ValidName(s.Workflow.Name):
		add(".workflow.name", "must be 1-63 characters of [a-z0-9-] starting and ending with a letter or digit; got %q",
			clipText(s.Workflow.Name))
	case s.Workflow.Version < 0:
		add(".workflow.version", "must be at least 1 (absent: the latest); got %d", s.Workflow.Version)
	}
	processOnly := map[string]bool{".plugin": s.Plugin != "", ".command": s.Command != "", ".env": len(s.Env) > 0,
		".secret_env": len(s.SecretEnv) > 0, ".replicas": s.Replicas != nil && *s.Replicas != 1,
		".attempt_timeout": s.AttemptTimeout != "", ".coscheduled": s.Coscheduled, ".args": len(s.Args) > 0,
		".http": s.HTTP != nil, ".container": s.Container != nil, ".kubernetes": s.Kubernetes != nil, ".cache": s.Cache != nil,
		".kill_grace": s.KillGrace != "", ".max_system_failures": s.MaxSystemFailures != nil,
		".duration": s.Duration != "", ".resources": s.Resources != nil, ".constraints": len(s.Constraints) > 0,
		".concurrency": s.Concurrency != nil, ".rate_limits": len(s.RateLimits) > 0,
		".scheduling_timeout": s.SchedulingTimeout != "", ".network": s.Network != "",
		".wait_exit_code": s.WaitExitCode != nil, ".wait_timeout": s.WaitTimeout != ""}
	for _, field := range slices.Sorted(maps.Keys(processOnly)) {
		if processOnly[field] {
			add(field, "a workflow step runs a template as a child run, not a process: it takes no %s", field[1:])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Params)) {
		if msg := paramNameProblem(name); msg != "" {
			add(".params."+clipText(name), "%s", msg)
		} else if k := slices.IndexFunc(s.Inputs, func(in Input) bool { return in.As == name }); k >= 0 {
			add(".params."+name, "is also given by inputs[%d]; give it once", k)
		}
	}
	return errs
}

// workflowOnly names the fields of a step that only a workflow step takes.
func (s Step) workflowOnly() []FieldError {
	var errs []FieldError
	if s.Workflow != nil {
		errs = append(errs, FieldError{".workflow", "only a workflow step takes it; this step is a " + s.Kind})
	}
	if s.Params != nil {
		errs = append(errs, FieldError{".params", "only a workflow step takes it; this step is a " + s.Kind})
	}
	return errs
}

// validateOutputs checks the spec's outputs: valid unique names, each the
// output of a step that declares it.
func (w WorkflowSpec) validateOutputs(index map[string]int) []FieldError {
	var errs []FieldError
	if len(w.Outputs) > MaxOutputs {
		return []FieldError{{".outputs", fmt.Sprintf("has %d outputs; at most %d", len(w.Outputs), MaxOutputs)}}
	}
	for i, o := range w.Outputs {
		at := fmt.Sprintf(".outputs[%d]", i)
		step, output := o.Producer()
		j, known := index[step]
		switch {
		case !outputName.MatchString(o.Name):
			errs = append(errs, FieldError{at + ".name", fmt.Sprintf("must be 1-63 characters of [A-Za-z0-9_], not starting with a digit; got %q", clipText(o.Name))})
		case slices.IndexFunc(w.Outputs, func(p SpecOutput) bool { return p.Name == o.Name }) < i:
			errs = append(errs, FieldError{at + ".name", fmt.Sprintf("duplicate output %q", o.Name)})
		case !ValidName(step) || !outputName.MatchString(output):
			errs = append(errs, FieldError{at + ".from", fmt.Sprintf("must be \"<step>.<output>\"; got %q", clipText(o.From))})
		case !known:
			errs = append(errs, FieldError{at + ".from", fmt.Sprintf("names unknown step %q", step)})
		case !slices.Contains(w.Steps[j].Outputs, output):
			errs = append(errs, FieldError{at + ".from", fmt.Sprintf("step %q declares no output %q", step, output)})
		}
	}
	return errs
}

// OutputNames lists the names of the spec's outputs, in order.
func (w WorkflowSpec) OutputNames() []string {
	names := make([]string, len(w.Outputs))
	for i, o := range w.Outputs {
		names[i] = o.Name
	}
	return names
}

// RunOutputs returns a run's outputs, name → value, from its steps'
// outputs (step → output → value, as a run's SUCCEEDED steps have them);
// an output whose step has none is "".
func (w WorkflowSpec) RunOutputs(steps map[string]map[string]string) map[string]string {
	out := make(map[string]string, len(w.Outputs))
	for _, o := range w.Outputs {
		step, output := o.Producer()
		out[o.Name] = steps[step][output]
	}
	return out
}

// ChildParamNames lists the names a workflow step gives its child's params
// by: its params' keys, then its inputs' `as` names.
func (s Step) ChildParamNames() []string {
	names := slices.Sorted(maps.Keys(s.Params))
	for _, in := range s.Inputs {
		names = append(names, in.As)
	}
	return names
}

// checkChildParams checks, against the child template's param
// declarations, the names a workflow step gives (ChildParamNames, and
// item when the step gives one for each child) and the type of its literal
// params: a name the template does not declare, a required one not given,
// a literal of the wrong type. Fields are relative to the step.
func (s Step) checkChildParams(decls []Param, item string) []FieldError {
	var errs []FieldError
	declared := func(name string) (Param, bool) {
		i := slices.IndexFunc(decls, func(p Param) bool { return p.Name == name })
		if i < 0 {
			return Param{}, false
		}
		return decls[i], true
	}
	for _, name := range slices.Sorted(maps.Keys(s.Params)) {
		p, ok := declared(name)
		if !ok {
			errs = append(errs, FieldError{".params." + name, "unknown param; the template declares " + declaredNames(decls)})
			continue
		}
		if _, msg := p.value(s.Params[name]); msg != "" {
			errs = append(errs, FieldError{".params." + name, msg})
		}
	}
	for k, in := range s.Inputs {
		if _, ok := declared(in.As); !ok {
			errs = append(errs, FieldError{fmt.Sprintf(".inputs[%d].as", k),
				fmt.Sprintf("%q is no param of the template, which declares %s", in.As, declaredNames(decls))})
		}
	}
	given := s.ChildParamNames()
	if item != "" {
		if _, ok := declared(item); !ok {
			errs = append(errs, FieldError{".for_each.as",
				fmt.Sprintf("each item is given as param %q, which the template does not declare (it declares %s)", item, declaredNames(decls))})
		}
		given = append(given, item)
	}
	for _, p := range decls {
		if p.Required && !slices.Contains(given, p.Name) {
			errs = append(errs, FieldError{".params", fmt.Sprintf("the template's param %q is required; give it in params or inputs", p.Name)})
		}
	}
	return errs
}

// ItemParam is the child param a workflow step's for_each gives each item
// as (for_each.as, default ITEM); "" for a step without for_each.
func (s Step) ItemParam() string {
	if s.ForEach == nil {
		return ""
	}
	return s.ForEach.EnvName()
}

// checkChildOutputs checks that each output a workflow step declares is one
// its child's spec declares. Fields are relative to the step.
func (s Step) checkChildOutputs(name string, child WorkflowSpec) []FieldError {
	var errs []FieldError
	for k, o := range s.Outputs {
		if !slices.ContainsFunc(child.Outputs, func(c SpecOutput) bool { return c.Name == o }) {
			errs = append(errs, FieldError{fmt.Sprintf(".outputs[%d]", k),
				fmt.Sprintf("template %s declares no output %q (its outputs: %s)", name, o, listOr(child.OutputNames()))})
		}
	}
	return errs
}

// listOr is names joined by ", ", or "none".
func listOr(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// ChildParams returns the params a child run of workflow step s takes, as
// ResolveParams returns them against the child template's decls: the
// step's literal params, its inputs (the producers' output text, by input
// name, read as the declared param's type: a string as written, a number,
// boolean or json param parsed from the text, surrounding white space
// ignored) and, when item is not nil, the item's text as param itemAs (for
// each child of a fan-out). Errors name the step's fields.
func (s Step) ChildParams(decls []Param, inputs map[string]string, itemAs string, item *string) (map[string]any, []FieldError) {
	given := make(map[string]any, len(s.Params)+len(s.Inputs)+1)
	maps.Copy(given, s.Params)
	var errs []FieldError
	text := func(field, name, v string) {
		i := slices.IndexFunc(decls, func(p Param) bool { return p.Name == name })
		if i < 0 {
			given[name] = v // ResolveParams names it unknown
			return
		}
		x, msg := paramFromText(decls[i].Type, v)
		if msg != "" {
			errs = append(errs, FieldError{field, msg})
			return
		}
		given[name] = x
	}
	for k, in := range s.Inputs {
		text(fmt.Sprintf(".inputs[%d]", k), in.As, inputs[in.As])
	}
	if item != nil {
		text(".item", itemAs, *item)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return ResolveParams(decls, given, ".params")
}

// paramFromText reads an output's text as a value of a param of type typ.
func paramFromText(typ, v string) (any, string) {
	t := strings.TrimSpace(v)
	switch typ {
	case ParamNumber:
		f, err := strconv.ParseFloat(t, 64)
		if err != nil {
			return nil, fmt.Sprintf("%q is not a number", clipText(t))
		}
		return f, ""
	case ParamBoolean:
		b, err := strconv.ParseBool(t)
		if err != nil || (t != "true" && t != "false") {
			return nil, fmt.Sprintf("%q is not true or false", clipText(t))
		}
		return b, ""
	case ParamJSON:
		x, err := decodedJSONText(t)
		if err != nil {
			return nil, "is not JSON: " + err.Error()
		}
		return x, ""
	}
	return v, ""
}

// CheckChildStart says why a workflow step s of a run at parentDepth,
// whose ancestors ran the templates ancestors (the run's own first), cannot
// start its child of template name with spec child, or "" when it can: a
// depth past MaxDepth, a template cycle, params or outputs the template
// does not fit (itemAs, when not "", is the param each child's item is
// given as). What the api checks at creation when it knows the templates,
// checked again when the step starts: the latest version may have changed.
func (s Step) CheckChildStart(name string, child WorkflowSpec, ancestors []string, parentDepth int, itemAs string) string {
	if parentDepth+1 > MaxDepth {
		return fmt.Sprintf("a child run of this step would nest %d deep; at most %d", parentDepth+1, MaxDepth)
	}
	if i := slices.Index(ancestors, name); i >= 0 {
		path := append(slices.Clone(ancestors[:i+1]), name)
		slices.Reverse(path[:len(path)-1])
		return "template cycle: " + strings.Join(path, " -> ")
	}
	errs := append(s.checkChildParams(child.Params, itemAs), s.checkChildOutputs(name, child)...)
	if len(errs) > 0 {
		return fmt.Sprintf("template %s does not fit the step: %s%s", name, errs[0].Field[1:], ": "+errs[0].Message)
	}
	return ""
}

// ChildRunName is the name of a workflow step's child run: run-step-index,
// with -r<try> for a child started after try others of the same index (a
// retry, a retry of the whole step or a restart: try counts them across
// generations). A name longer than 63 characters keeps its first 52 and
// ends in "-" and 10 hex digits of its SHA-256, so it stays valid and
// distinct.
func ChildRunName(run, step string, index, try int) string {
	name := run + "-" + step + "-" + strconv.Itoa(index)
	if try > 0 {
		name += "-r" + strconv.Itoa(try)
	}
	if len(name) <= 63 {
		return name
	}
	return hashedName(name)
}

// AltChildRunName is the name a child run takes when ChildRunName's is
// taken by another run: the first 52 characters of it, "-" and 10 hex
// digits of the SHA-256 of its parent's key (project/domain/run/action),
// index and try.
func AltChildRunName(parent ActionKey, index, try int) string {
	name := ChildRunName(parent.Run, parent.Action, index, try)
	return hashedName(fmt.Sprintf("%s#%s/%d/%d", name[:min(len(name), 52)], parent, index, try))
}

func hashedName(s string) string {
	sum := sha256.Sum256([]byte(s))
	prefix := strings.TrimRight(s[:min(len(s), 52)], "-#/")
	prefix = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, prefix)
	return prefix + "-" + hex.EncodeToString(sum[:])[:10]
}

// ChildStart is one child a workflow step starts: its index (0 for a
// single child; the item's index under a fan-out) and its item (nil: none).
type ChildStart struct {
	Index int
	Item  *string
}

// ChildView is what the step's decision knows of the latest child of one
// index in the step's current generation.
type ChildView struct {
	Index int
	// Name is the child run's.
	Name  string
	Phase Phase
	// Tries counts the children of the index in the current generation,
	// this one included.
	Tries int
}

// ChildrenDecision is what a workflow step's children decide.
type ChildrenDecision struct {
	// Phase is the step's phase.
	Phase Phase
	// Retry lists the indexes whose child failed within the step's
	// max_retries_failure: a new child of each starts.
	Retry []int
	// Reason names the child a failure is of ("" otherwise).
	Reason string
	// Survivors is set when the step failed while children still run:
	// they are aborted.
	Survivors bool
}

// retriedChild reports whether a child ending in phase p is retried (while
// the step's max_retries_failure allows): a FAILED or TIMED_OUT child, as a
// task's user failure is. A child ABORTED by its own abort, UNSCHEDULABLE or
// WORKER_FAILED is not.
func retriedChild(p Phase) bool { return p == PhaseFailed || p == PhaseTimedOut }

// DecideChildren decides a started workflow step's phase from its n
// children's latest of the current generation (children, by index; an
// index without one is starting, QUEUED), as Iris's job derivation does
// from tasks: a failed child within max_retries_failure tries is retried;
// more failed children than max_task_failures fail the step, naming the
// first, and the survivors are aborted; all ended SUCCEEDED (or failed
// within max_task_failures) is SUCCEEDED; a RUNNING child makes it
// RUNNING, else a PAUSED one PAUSED (a child suspended or waiting), else
// any child that ended RUNNING, else QUEUED.
func (s Step) DecideChildren(n int, children []ChildView) ChildrenDecision {
	latest := make([]*ChildView, n)
	for i := range children {
		if c := &children[i]; c.Index >= 0 && c.Index < n {
			latest[c.Index] = c
		}
	}
	var d ChildrenDecision
	var failed, ended int
	var running, paused, live bool
	for i, c := range latest {
		switch {
		case c == nil:
			live = true
		case retriedChild(c.Phase) && c.Tries <= s.RetriesFailure():
			d.Retry, live = append(d.Retry, i), true
		case c.Phase.IsTerminal():
			ended++
			if c.Phase != PhaseSucceeded {
				failed++
				if d.Reason == "" {
					d.Reason = fmt.Sprintf("child run %s ended %s", c.Name, c.Phase)
				}
			}
		default:
			live = true
			running = running || c.Phase == PhaseRunning
			paused = paused || c.Phase == PhasePaused
		}
	}
	switch {
	case failed > s.TaskFailuresAllowed():
		d.Phase, d.Retry, d.Survivors = PhaseFailed, nil, live
	case !live:
		d.Phase, d.Reason = PhaseSucceeded, ""
	case running || len(d.Retry) > 0:
		d.Phase = PhaseRunning
	case paused:
		d.Phase = PhasePaused
	case ended > 0:
		d.Phase = PhaseRunning
	default:
		d.Phase = PhaseQueued
	}
	if d.Phase != PhaseFailed {
		d.Reason = ""
	}
	return d
}

// GatherChildOutputs is a workflow step's value of each output it declares
// from its children's outputs (perIndex, by child index; a child without
// is ""): the child's own with one child and !array, else the JSON array of
// every child's in index order, as a task step gathers its replicas'.
func GatherChildOutputs(declared []string, perIndex []map[string]string, array bool) map[string]string {
	out := make(map[string]string, len(declared))
	for _, name := range declared {
		values := make([]string, len(perIndex))
		for i, o := range perIndex {
			values[i] = o[name]
		}
		if len(values) == 1 && !array {
			out[name] = values[0]
			continue
		}
		out[name] = JSONStrings(values)
	}
	return out
}

// JSONStrings is values as a JSON array, HTML characters not escaped and
// without a trailing newline (encoding/json of []string).
func JSONStrings(values []string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(values) // a []string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// decodedJSONText decodes JSON text into an any, as encoding/json does.
func decodedJSONText(t string) (any, error) {
	var out any
	err := json.Unmarshal([]byte(t), &out)
	return out, err
}
