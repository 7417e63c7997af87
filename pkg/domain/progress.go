package domain

// RootActionName is the name of every run's root action; the run's phase is
// its phase.
const RootActionName = "a0"

// StepStatus is what progression knows of one step's action.
type StepStatus struct {
	// Started is true once the step's tasks were created.
	Started bool
	// Phase is the action's phase.
	Phase Phase
}

// Progress is the outcome of one evaluation of a workflow.
type Progress struct {
	// Start lists steps to start now, in spec order.
	Start []string
	// Skip lists steps that will never run because an earlier step failed.
	Skip []string
	// Phase is the run's (root action's) phase.
	Phase Phase
}

// Evaluate decides which steps of spec start now, which are skipped, and the
// run's phase, from the status of each step (absent = not started).
//
// DAG mode starts every step whose depends_on all succeeded; StepByStep starts
// the first step not yet succeeded once its predecessor did (KubeVela's two
// running modes, seeds/004). Both fail fast: once a step ends in a failure
// phase no new step starts, the unstarted ones are SKIPPED, and when nothing
// is left running the run takes the first failure's phase (in spec order).
func Evaluate(spec WorkflowSpec, status map[string]StepStatus) Progress {
	var p Progress
	var failure Phase
	for _, s := range spec.Steps {
		st := status[s.Name]
		if st.Phase.IsTerminal() && !st.Phase.IsSuccess() && failure == "" {
			failure = st.Phase
		}
	}
	running, started := false, false
	for i, s := range spec.Steps {
		st := status[s.Name]
		if st.Started || st.Phase.IsTerminal() {
			started = started || st.Started
			running = running || !st.Phase.IsTerminal()
			continue
		}
		if failure != "" {
			p.Skip = append(p.Skip, s.Name)
			continue
		}
		if ready(spec, i, status) {
			p.Start = append(p.Start, s.Name)
			running = true
		} else {
			running = true
		}
	}
	switch {
	case running && (started || len(p.Start) > 0):
		p.Phase = PhaseRunning
	case running:
		p.Phase = PhaseQueued
	case failure != "":
		p.Phase = failure
	default:
		p.Phase = PhaseSucceeded
	}
	return p
}

// ready reports whether step i may start: in DAG mode all its dependencies
// succeeded; in StepByStep mode the step before it succeeded.
func ready(spec WorkflowSpec, i int, status map[string]StepStatus) bool {
	if spec.Mode == ModeDAG {
		for _, d := range spec.Steps[i].DependsOn {
			if !status[d].Phase.IsSuccess() {
				return false
			}
		}
		return true
	}
	return i == 0 || status[spec.Steps[i-1].Name].Phase.IsSuccess()
}
