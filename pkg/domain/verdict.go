package domain

import (
	"errors"
	"maps"
	"slices"
)

// Verdicts are what a run's step conditions decided, found by
// ConditionVerdicts from one status of the run's steps, each with what it
// read: EvaluateWith takes a verdict only while what it read is unchanged.
// They let the caller evaluate conditions (CEL, bounded but not free)
// outside the transaction that holds the run's locks, and decide under the
// locks from those verdicts alone. The zero value holds none.
type Verdicts struct {
	byStep map[verdictKey]verdict
}

// verdictKey names a verdict: a step's condition decides once per value of
// run.failed.
type verdictKey struct {
	step   string
	failed bool
}

// verdict is one condition's outcome and the steps it read: their phase
// and outputs (every step's when all is set; nothing else of a step is
// visible to a condition). The run's params, which a condition also reads,
// never change.
type verdict struct {
	outcome condOutcome
	all     bool
	read    map[string]StepStatus
}

// Len returns how many verdicts v holds.
func (v Verdicts) Len() int { return len(v.byStep) }

// ConditionVerdicts evaluates the conditions Evaluate would evaluate over
// status (the same arguments), within the same bounds (one decision,
// exprBudget), and returns their verdicts. It is pure; a caller runs it
// outside any lock, then decides with EvaluateWith under the run's locks.
func ConditionVerdicts(spec WorkflowSpec, status map[string]StepStatus, suspended bool, params map[string]any) Verdicts {
	conds := newConditions()
	conds.record = map[verdictKey]verdict{}
	defer conds.budget.done()
	evaluate(spec, status, suspended, params, conds)
	return Verdicts{byStep: conds.record}
}

// EvaluateWith is Evaluate deciding each condition from its verdict in v,
// evaluating none. When a condition it needs has no verdict, or one whose
// inputs (the phases and outputs of the steps it reads, run.failed)
// differ from what the verdict read, it decides nothing — no step starts,
// is SKIPPED or FAILED, as a condition yet unknown may fail the run —
// and Progress.Unjudged lists those steps; Phase is then the run's phase
// as status stands.
func EvaluateWith(spec WorkflowSpec, status map[string]StepStatus, suspended bool, params map[string]any,
	v Verdicts) Progress {
	conds := newConditions()
	conds.verdicts, conds.judged = v, true
	p := evaluate(spec, status, suspended, params, conds)
	if len(p.Unjudged) == 0 {
		return p
	}
	return Progress{Reasons: map[string]string{}, Phase: runPhase(spec, status, status, suspended, false),
		Unjudged: p.Unjudged}
}

// conditions decide the conditions of one evaluate, by step: evaluated
// within the budget they share (recording each outcome when record is
// set), or, when judged, taken from verdicts.
type conditions struct {
	budget   exprBudget
	held     map[string]condOutcome
	judged   bool
	verdicts Verdicts
	record   map[verdictKey]verdict
	missed   map[string]bool // steps whose last outcome had no verdict
}

func newConditions() *conditions {
	return &conditions{held: map[string]condOutcome{}, missed: map[string]bool{}}
}

// condOutcome is what a step's condition decided, with the run.failed it
// read; none of run, skip and fail: the step waits.
type condOutcome struct {
	failed     bool
	run        bool
	skip, fail string
}

// outcome decides step s's condition, once per value of run.failed: its
// dependencies ended, so nothing else it reads changes within an evaluate.
func (c *conditions) outcome(s Step, vars CondVars) condOutcome {
	if o, ok := c.held[s.Name]; ok && o.failed == vars.Failed {
		return o
	}
	if c.judged {
		v, ok := c.verdicts.byStep[verdictKey{s.Name, vars.Failed}]
		if !ok || !v.matches(vars.Steps) {
			c.missed[s.Name] = true
			return condOutcome{failed: vars.Failed}
		}
		delete(c.missed, s.Name)
		c.held[s.Name] = v.outcome
		return v.outcome
	}
	o, cond := c.evaluate(s, vars)
	c.held[s.Name] = o
	if c.record != nil {
		c.record[verdictKey{s.Name, vars.Failed}] = readBy(cond, vars.Steps, o)
	}
	return o
}

// evaluate evaluates step s's condition within the budget, and returns
// its outcome and the compiled condition (nil when it does not compile).
func (c *conditions) evaluate(s Step, vars CondVars) (condOutcome, *Condition) {
	o := condOutcome{failed: vars.Failed}
	cond, err := CompileCondition(s.If)
	if err != nil {
		o.skip = "its condition does not compile: " + err.Error()
		return o, nil
	}
	ok, err := cond.eval(&c.budget, vars)
	switch {
	case errors.Is(err, ErrExprLimit):
		o.fail = "its condition failed: " + err.Error()
	case err != nil:
		o.skip = "its condition failed: " + err.Error()
	case !ok:
		o.skip = "its condition is false"
	default:
		o.run = true
	}
	return o, cond
}

// unjudged lists the steps whose condition had no verdict when last
// asked, in spec order.
func (c *conditions) unjudged(spec WorkflowSpec) []string {
	if len(c.missed) == 0 {
		return nil
	}
	names := slices.Collect(maps.Keys(c.missed))
	slices.SortFunc(names, func(a, b string) int { return spec.index(a) - spec.index(b) })
	return names
}

// readBy is the verdict of outcome o of cond over steps: what cond reads
// of them — every step when it reads steps other than by name, or did not
// compile; a step it names that is absent reads as the zero status.
func readBy(cond *Condition, steps map[string]StepStatus, o condOutcome) verdict {
	v := verdict{outcome: o, all: cond == nil || cond.readsAnySteps}
	names := cond.stepsRead(v.all, steps)
	v.read = make(map[string]StepStatus, len(names))
	for _, name := range names {
		st := steps[name]
		v.read[name] = StepStatus{Phase: st.Phase, Outputs: st.Outputs}
	}
	return v
}

// stepsRead names the steps a verdict of c over steps reads: every one of
// steps when all is set, else those c names.
func (c *Condition) stepsRead(all bool, steps map[string]StepStatus) []string {
	if all {
		return slices.Collect(maps.Keys(steps))
	}
	return c.Steps
}

// matches reports whether steps show what v read: the same phase and
// outputs of each step it read (absent: the zero status) and, when it
// read every step, no other step.
func (v verdict) matches(steps map[string]StepStatus) bool {
	if v.all && len(steps) != len(v.read) {
		return false
	}
	for name, was := range v.read {
		now := steps[name]
		if now.Phase != was.Phase || !maps.Equal(now.Outputs, was.Outputs) {
			return false
		}
	}
	return true
}
