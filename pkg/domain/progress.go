package domain

import (
	"maps"
	"slices"
)

// RootActionName is the name of every run's root action; the run's phase is
// its phase.
const RootActionName = "a0"

// StepStatus is what progression knows of one step's action.
type StepStatus struct {
	// Started is true once the step started (its tasks were created, or it
	// began to wait).
	Started bool
	// Phase is the action's phase.
	Phase Phase
	// Outputs are a SUCCEEDED step's outputs, for conditions.
	Outputs map[string]string
}

// Progress is the outcome of one evaluation of a workflow.
type Progress struct {
	// Start lists steps to start now, in spec order.
	Start []string
	// Skip lists steps that will never run, in the order decided; Reasons
	// says why for each.
	Skip []string
	// Fail lists steps whose condition exceeded its limits (ErrExprLimit):
	// they end FAILED without running, in the order decided, and Reasons
	// says why for each.
	Fail    []string
	Reasons map[string]string
	// Phase is the run's (root action's) phase.
	Phase Phase
	// Unjudged lists, in spec order, the steps whose condition
	// EvaluateWith had no verdict for; it then decided nothing. Evaluate
	// leaves it empty.
	Unjudged []string
}

// Evaluate decides which steps of spec start now, which are SKIPPED, and the
// run's phase, from the status of each step (absent = not started) and
// whether a suspend of the run is in force; params are the run's
// (ResolveParams; nil = none), which conditions read as params.<name>.
//
// KubeVela's two running modes: DAG starts a step once the steps it depends
// on have ended (its depends_on, the producers of its inputs, the steps its
// condition reads); StepByStep once the step before it has. Whether it then
// runs is its condition's (Argo's `when`, KubeVela's `if`): absent, it runs
// when every dependency SUCCEEDED and no step of the run failed (so a failure
// stops the workflow, and a SKIPPED dependency skips it too); `always`, it
// runs whatever happened (a clean-up); else its CEL expression decides. A
// step that will not run is SKIPPED. While a suspend is in force no step
// starts. The run is RUNNING while a step runs, PAUSED when nothing runs and
// a step (or the run) is paused, and once every step ended it takes the
// first failure's phase in spec order, else SUCCEEDED.
//
// The conditions of one Evaluate are one decision (exprBudget): together
// they cost at most about MaxBatchCost and MaxBatchTime. A caller holding
// the run's locks evaluates them beforehand instead (ConditionVerdicts)
// and decides with EvaluateWith. A condition that exceeds a limit
// FAILS its step (a false or failing one SKIPS it), and one is evaluated
// once per Evaluate unless run.failed changed meanwhile.
func Evaluate(spec WorkflowSpec, status map[string]StepStatus, suspended bool, params map[string]any) Progress {
	conds := newConditions()
	defer conds.budget.done()
	return evaluate(spec, status, suspended, params, conds)
}

// evaluate is Evaluate with its steps' conditions decided by conds.
func evaluate(spec WorkflowSpec, status map[string]StepStatus, suspended bool, params map[string]any,
	conds *conditions) Progress {
	p := Progress{Reasons: map[string]string{}}
	work := maps.Clone(status)
	if work == nil {
		work = map[string]StepStatus{}
	}
	vars := CondVars{Steps: work, Failed: anyFailed(work), Params: params}
	for changed := true; changed; {
		changed = false
		for i, s := range spec.Steps {
			st := work[s.Name]
			if st.Started || st.Phase.IsTerminal() {
				continue
			}
			run, why, fail := decide(spec, i, vars, conds)
			switch {
			case fail != "":
				p.Fail, p.Reasons[s.Name] = append(p.Fail, s.Name), fail
				work[s.Name] = StepStatus{Phase: PhaseFailed}
				vars.Failed = true
				changed = true
			case why != "":
				p.Skip, p.Reasons[s.Name] = append(p.Skip, s.Name), why
				work[s.Name] = StepStatus{Phase: PhaseSkipped}
				changed = true
			case run && !suspended:
				p.Start = append(p.Start, s.Name)
				work[s.Name] = StepStatus{Started: true, Phase: s.startPhase()}
				changed = true
			}
		}
	}
	slices.SortStableFunc(p.Start, func(a, b string) int { return spec.index(a) - spec.index(b) })
	p.Phase = runPhase(spec, status, work, suspended, len(p.Start) > 0)
	p.Unjudged = conds.unjudged(spec)
	return p
}

// startPhase is a step's phase once started: a suspend or an approval waits,
// PAUSED; a task step is QUEUED for placement.
func (s Step) startPhase() Phase {
	if s.Kind == KindSuspend || s.Kind == KindApproval {
		return PhasePaused
	}
	return PhaseQueued
}

// decide returns whether step i runs now, or why it never will (skip, ""
// while it waits for its dependencies), or why it fails without running
// (its condition exceeded its limits); vars.Steps is the status decided so
// far.
func decide(spec WorkflowSpec, i int, vars CondVars, conds *conditions) (run bool, skip, fail string) {
	s, work := spec.Steps[i], vars.Steps
	if s.If == "" && vars.Failed {
		return false, "a step of the run failed", ""
	}
	deps := spec.Dependencies(i)
	for _, d := range deps {
		if !work[d].Phase.IsTerminal() {
			return false, "", ""
		}
	}
	switch s.If {
	case "":
		for _, d := range deps {
			if work[d].Phase != PhaseSucceeded {
				return false, "step " + d + " did not succeed", ""
			}
		}
		return true, "", ""
	case IfAlways:
		return true, "", ""
	}
	o := conds.outcome(s, vars)
	return o.run, o.skip, o.fail
}

// anyFailed reports whether a step ended in a failure phase.
func anyFailed(status map[string]StepStatus) bool {
	for _, st := range status {
		if st.Phase.IsTerminal() && st.Phase != PhaseSucceeded && st.Phase != PhaseSkipped {
			return true
		}
	}
	return false
}

// runPhase is the run's phase once the decisions in work are applied;
// before is the status the evaluation started from.
func runPhase(spec WorkflowSpec, before, work map[string]StepStatus, suspended, starting bool) Phase {
	var running, paused, waiting, started bool
	var failure Phase
	for _, s := range spec.Steps {
		st := work[s.Name]
		started = started || before[s.Name].Started
		switch {
		case st.Phase == PhasePaused:
			paused = true
		case st.Started && !st.Phase.IsTerminal():
			running = true
		case !st.Phase.IsTerminal():
			waiting = true
		case st.Phase != PhaseSucceeded && st.Phase != PhaseSkipped && failure == "":
			failure = st.Phase
		}
	}
	switch {
	case running && (started || starting):
		return PhaseRunning
	case running:
		return PhaseQueued
	case paused || waiting && suspended:
		return PhasePaused
	case waiting && started:
		return PhaseRunning
	case waiting:
		return PhaseQueued
	case failure != "":
		return failure
	}
	return PhaseSucceeded
}

// Dependencies returns the steps step i waits for: in DAG mode its
// depends_on, the producers of its inputs and of its for_each list
// (KubeVela: an input implies the dependency) and the steps its condition reads; in StepByStep mode the step
// before it.
func (w WorkflowSpec) Dependencies(i int) []string {
	if w.Mode != ModeDAG {
		if i == 0 {
			return nil
		}
		return []string{w.Steps[i-1].Name}
	}
	s := w.Steps[i]
	deps := slices.Clone(s.DependsOn)
	for _, in := range s.Inputs {
		step, _ := in.Producer()
		deps = append(deps, step)
	}
	if s.ForEach != nil && s.ForEach.From != "" {
		step, _ := s.ForEach.Producer()
		deps = append(deps, step)
	}
	if s.If != "" && s.If != IfAlways {
		if c, err := CompileCondition(s.If); err == nil {
			deps = append(deps, c.Steps...)
		}
	}
	slices.Sort(deps)
	deps = slices.Compact(deps)
	return slices.DeleteFunc(deps, func(d string) bool { return d == s.Name })
}

// index returns the position of step name in the spec, or -1.
func (w WorkflowSpec) index(name string) int {
	return slices.IndexFunc(w.Steps, func(s Step) bool { return s.Name == name })
}

// RestartSteps returns, in spec order, the steps a restart runs again: the
// step from and every step downstream of it, or, when from is "", every step
// that did not succeed and everything downstream of those (as `argo retry`
// does). Downstream in DAG mode is the steps that depend on it, transitively;
// in StepByStep mode every later step.
func RestartSteps(spec WorkflowSpec, status map[string]StepStatus, from string) []string {
	set := map[string]bool{}
	for _, s := range spec.Steps {
		if from == s.Name || from == "" && status[s.Name].Phase != PhaseSucceeded {
			set[s.Name] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for i, s := range spec.Steps {
			if set[s.Name] {
				continue
			}
			for _, d := range spec.Dependencies(i) {
				if set[d] {
					set[s.Name], changed = true, true
					break
				}
			}
		}
	}
	var out []string
	for _, s := range spec.Steps {
		if set[s.Name] {
			out = append(out, s.Name)
		}
	}
	return out
}
