package domain_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Status shorthands.
var (
	stRunning   = domain.StepStatus{Started: true, Phase: domain.PhaseRunning}
	stQueued    = domain.StepStatus{Started: true, Phase: domain.PhaseQueued}
	stPaused    = domain.StepStatus{Started: true, Phase: domain.PhasePaused}
	stSucceeded = domain.StepStatus{Started: true, Phase: domain.PhaseSucceeded}
	stFailed    = domain.StepStatus{Started: true, Phase: domain.PhaseFailed}
	stAborted   = domain.StepStatus{Started: true, Phase: domain.PhaseAborted}
	stTimedOut  = domain.StepStatus{Started: true, Phase: domain.PhaseTimedOut}
	stWorkerF   = domain.StepStatus{Started: true, Phase: domain.PhaseWorkerFailed}
	stSkippedIf = domain.StepStatus{Phase: domain.PhaseSkipped} // an `if` that is false
)

func dagSpec(steps ...domain.Step) domain.WorkflowSpec {
	return domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: steps}
}

func seqSpec(names ...string) domain.WorkflowSpec {
	w := domain.WorkflowSpec{Mode: domain.ModeStepByStep}
	for _, n := range names {
		w.Steps = append(w.Steps, shellStep(n))
	}
	return w
}

// diamond: a -> (b, c) -> d.
var diamond = dagSpec(shellStep("a"), shellStep("b", "a"), shellStep("c", "a"), shellStep("d", "b", "c"))

type st = map[string]domain.StepStatus

func TestEvaluate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string // the rule, quoted from Evaluate's contract (KubeVela's modes + fail-fast)
		spec   domain.WorkflowSpec
		status st
		start  []string
		skip   []string
		phase  domain.Phase
	}{
		// DAG.
		{"DAG: steps with no depends_on start at once", diamond, nil, []string{"a"}, nil, domain.PhaseRunning},
		{"DAG: If one workflow step has not met all its dependencies, it will wait", diamond,
			st{"a": stRunning}, nil, nil, domain.PhaseRunning},
		{"DAG: fan-out: every step whose depends_on all succeeded starts, concurrently, in spec order", diamond,
			st{"a": stSucceeded}, []string{"b", "c"}, nil, domain.PhaseRunning},
		{"DAG: fan-in waits for every dependency (c still running)", diamond,
			st{"a": stSucceeded, "b": stSucceeded, "c": stRunning}, nil, nil, domain.PhaseRunning},
		{"DAG: fan-in starts once all dependencies succeeded", diamond,
			st{"a": stSucceeded, "b": stSucceeded, "c": stSucceeded}, []string{"d"}, nil, domain.PhaseRunning},
		{"DAG: all steps succeeded -> run SUCCEEDED", diamond,
			st{"a": stSucceeded, "b": stSucceeded, "c": stSucceeded, "d": stSucceeded}, nil, nil, domain.PhaseSucceeded},
		{"DAG: independent roots all start together", dagSpec(shellStep("x"), shellStep("y"), shellStep("z", "x")),
			nil, []string{"x", "y"}, nil, domain.PhaseRunning},
		{"DAG: start order follows spec order, not dependency order",
			dagSpec(shellStep("c", "a"), shellStep("b", "a"), shellStep("a")),
			st{"a": stSucceeded}, []string{"c", "b"}, nil, domain.PhaseRunning},
		{"DAG: a step whose dependency was SKIPPED is SKIPPED too unless its own if says otherwise", diamond,
			st{"a": stSucceeded, "b": stSkippedIf, "c": stSucceeded}, nil, []string{"d"}, domain.PhaseSucceeded},
		{"DAG: a started step is never started again", diamond,
			st{"a": stSucceeded, "b": stQueued}, []string{"c"}, nil, domain.PhaseRunning},
		{"DAG: a PAUSED step (suspend/approval) holds the run PAUSED once nothing runs; its dependents wait", diamond,
			st{"a": stSucceeded, "b": stPaused, "c": stSucceeded}, nil, nil, domain.PhasePaused},
		{"DAG: a PAUSED step beside a running one leaves the run RUNNING", diamond,
			st{"a": stSucceeded, "b": stPaused, "c": stRunning}, nil, nil, domain.PhaseRunning},

		// Fail fast in DAG mode.
		{"DAG fail-fast: once a step ends in a failure phase no new step starts; the unstarted are SKIPPED; running ones finish first",
			diamond, st{"a": stSucceeded, "b": stFailed, "c": stRunning}, nil, []string{"d"}, domain.PhaseRunning},
		{"DAG fail-fast: when nothing is left running the run takes the failure's phase",
			diamond, st{"a": stSucceeded, "b": stFailed, "c": stSucceeded}, nil, []string{"d"}, domain.PhaseFailed},
		{"DAG fail-fast: a step whose own dependencies succeeded is skipped too",
			dagSpec(shellStep("a"), shellStep("b", "a"), shellStep("c"), shellStep("e", "c")),
			st{"a": stFailed, "c": stSucceeded}, nil, []string{"b", "e"}, domain.PhaseFailed},
		{"DAG fail-fast: run ABORTED when a step was aborted",
			diamond, st{"a": stAborted}, nil, []string{"b", "c", "d"}, domain.PhaseAborted},
		{"DAG fail-fast: run WORKER_FAILED when a step lost its workers",
			diamond, st{"a": stSucceeded, "b": stWorkerF, "c": stSucceeded}, nil, []string{"d"}, domain.PhaseWorkerFailed},
		{"fail-fast: the run takes the first failure's phase (in spec order)",
			dagSpec(shellStep("x"), shellStep("y"), shellStep("z", "x", "y")),
			st{"x": stTimedOut, "y": stFailed}, nil, []string{"z"}, domain.PhaseTimedOut},
		{"fail-fast: first failure in spec order, not the first to happen",
			dagSpec(shellStep("x"), shellStep("y"), shellStep("z", "x", "y")),
			st{"x": stAborted, "y": stTimedOut}, nil, []string{"z"}, domain.PhaseAborted},
		{"fail-fast: steps SKIPPED by an earlier evaluation stay skipped and are not re-listed",
			diamond, st{"a": stSucceeded, "b": stFailed, "c": stSucceeded, "d": {Phase: domain.PhaseSkipped}}, nil, nil, domain.PhaseFailed},

		// StepByStep.
		{"StepByStep: all steps will be executed in order: the first starts", seqSpec("s1", "s2", "s3"), nil, []string{"s1"}, nil, domain.PhaseRunning},
		{"StepByStep: the next waits while its predecessor runs", seqSpec("s1", "s2", "s3"), st{"s1": stRunning}, nil, nil, domain.PhaseRunning},
		{"StepByStep: the next waits while its predecessor is queued", seqSpec("s1", "s2", "s3"), st{"s1": stQueued}, nil, nil, domain.PhaseRunning},
		{"StepByStep: the first step not yet succeeded starts once its predecessor did", seqSpec("s1", "s2", "s3"),
			st{"s1": stSucceeded}, []string{"s2"}, nil, domain.PhaseRunning},
		{"StepByStep: only one step at a time", seqSpec("s1", "s2", "s3"),
			st{"s1": stSucceeded, "s2": stSucceeded}, []string{"s3"}, nil, domain.PhaseRunning},
		{"StepByStep: a SKIPPED predecessor (false `if`) skips the next unless its own if says otherwise", seqSpec("s1", "s2", "s3"),
			st{"s1": stSucceeded, "s2": stSkippedIf}, nil, []string{"s3"}, domain.PhaseSucceeded},
		{"StepByStep: depends_on is ignored (only DAG reads it)",
			domain.WorkflowSpec{Mode: domain.ModeStepByStep, Steps: []domain.Step{shellStep("a"), shellStep("b", "zzz")}},
			st{"a": stSucceeded}, []string{"b"}, nil, domain.PhaseRunning},
		{"StepByStep: all succeeded -> run SUCCEEDED", seqSpec("s1", "s2"), st{"s1": stSucceeded, "s2": stSucceeded}, nil, nil, domain.PhaseSucceeded},
		{"StepByStep fail-fast: later steps SKIPPED, run FAILED", seqSpec("s1", "s2", "s3"),
			st{"s1": stSucceeded, "s2": stFailed}, nil, []string{"s3"}, domain.PhaseFailed},
		{"StepByStep fail-fast: run ABORTED", seqSpec("s1", "s2", "s3"),
			st{"s1": stAborted}, nil, []string{"s2", "s3"}, domain.PhaseAborted},
		{"StepByStep: a PAUSED step holds the run PAUSED", seqSpec("s1", "s2"), st{"s1": stPaused}, nil, nil, domain.PhasePaused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := domain.Evaluate(tc.spec, tc.status, false, nil)
			require.Equal(t, tc.start, p.Start, "Start")
			require.Equal(t, tc.skip, p.Skip, "Skip")
			require.Equal(t, tc.phase, p.Phase, "Phase")
		})
	}
}

// A step can reach a failure phase without its tasks ever being created
// (Started=false): in Capstan's design an abort marks the action and every
// non-terminal descendant ABORTED, started or not, and a spec that can never
// run fails at once, with no retry. Evaluate's contract: "once a step ends
// in a failure phase no new step starts, the unstarted ones are SKIPPED, and
// when nothing is left running the run takes the first failure's phase".
// In particular the run must never be SUCCEEDED when a step FAILED/ABORTED,
// and never wait forever (QUEUED with nothing to start).
func TestEvaluateFailureBeforeStart(t *testing.T) {
	t.Parallel()
	notStarted := func(p domain.Phase) domain.StepStatus { return domain.StepStatus{Phase: p} }
	tests := []struct {
		name   string
		spec   domain.WorkflowSpec
		status st
		skip   []string
		phase  domain.Phase
	}{
		{"run aborted before any step started: every action ABORTED -> run ABORTED, not SUCCEEDED",
			seqSpec("s1", "s2"), st{"s1": notStarted(domain.PhaseAborted), "s2": notStarted(domain.PhaseAborted)},
			nil, domain.PhaseAborted},
		{"last step FAILED before its tasks were created -> run FAILED, not SUCCEEDED",
			seqSpec("s1", "s2"), st{"s1": stSucceeded, "s2": notStarted(domain.PhaseFailed)},
			nil, domain.PhaseFailed},
		{"StepByStep: step FAILED before start -> later steps SKIPPED and run FAILED (not stuck QUEUED)",
			seqSpec("s1", "s2", "s3"), st{"s1": notStarted(domain.PhaseFailed)},
			[]string{"s2", "s3"}, domain.PhaseFailed},
		{"DAG: dependency FAILED before start -> dependents SKIPPED and run FAILED (not stuck QUEUED)",
			diamond, st{"a": notStarted(domain.PhaseFailed)},
			[]string{"b", "c", "d"}, domain.PhaseFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := domain.Evaluate(tc.spec, tc.status, false, nil)
			require.Empty(t, p.Start, "Start")
			require.Equal(t, tc.skip, p.Skip, "Skip")
			require.Equal(t, tc.phase, p.Phase, "Phase")
		})
	}
}

// Evaluate must not modify the status map or the spec it is given.
func TestEvaluateDoesNotMutate(t *testing.T) {
	t.Parallel()
	status := st{"a": stSucceeded, "b": stFailed}
	before := st{"a": stSucceeded, "b": stFailed}
	spec := dagSpec(shellStep("a"), shellStep("b", "a"), shellStep("c", "a"))
	_ = domain.Evaluate(spec, status, false, nil)
	require.Equal(t, before, status)
	require.Equal(t, dagSpec(shellStep("a"), shellStep("b", "a"), shellStep("c", "a")), spec)
}

// randomSpec builds a valid spec of n steps from the fuzz input: in DAG mode
// step k may depend on steps earlier in a hidden topological order, and the
// spec order is a random permutation of it (so dependencies may point
// forward in the spec).
func randomSpec(n int, dag bool, deps []byte, seed uint64) domain.WorkflowSpec {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	topo := make([]domain.Step, n)
	bi := 0
	for k := range topo {
		topo[k] = shellStep("s" + strconv.Itoa(k))
		if !dag {
			continue
		}
		for j := range k {
			if bi < len(deps) && deps[bi]&(1<<(j%8)) != 0 {
				topo[k].DependsOn = append(topo[k].DependsOn, topo[j].Name)
			}
			if j%8 == 7 {
				bi++
			}
		}
		bi++
	}
	w := domain.WorkflowSpec{Mode: domain.ModeStepByStep, Steps: topo}
	if dag {
		w.Mode = domain.ModeDAG
		r.Shuffle(n, func(i, j int) { w.Steps[i], w.Steps[j] = w.Steps[j], w.Steps[i] })
	}
	return w
}

// FuzzEvaluate drives a whole run: it evaluates, starts what Evaluate says,
// skips what it says, and ends running steps with outcomes taken from the
// input, until the run's phase is terminal. Invariants: a step is never
// started twice; a DAG step never starts before every dependency succeeded;
// StepByStep runs one step at a time, in order; no step starts after a
// failure; a terminal run has every step terminal; the final phase is
// SUCCEEDED iff no step failed, else the first failure's (in spec order).
func FuzzEvaluate(f *testing.F) {
	f.Add(uint8(4), true, []byte{0, 1, 1, 6}, []byte{1, 1, 1, 1}, uint64(1))
	f.Add(uint8(4), true, []byte{0, 1, 1, 6}, []byte{1, 2, 0, 1}, uint64(2))
	f.Add(uint8(3), false, []byte{}, []byte{1, 1, 1}, uint64(3))
	f.Add(uint8(3), false, []byte{}, []byte{0, 6, 3, 1}, uint64(4))
	f.Add(uint8(6), true, []byte{0, 0, 3, 3, 12, 31}, []byte{0, 0, 5, 1, 4, 1, 2}, uint64(5))
	f.Add(uint8(1), true, []byte{}, []byte{3}, uint64(6))
	f.Add(uint8(12), true, []byte{255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255}, []byte{}, uint64(7))
	f.Add(uint8(9), false, []byte{}, []byte{6, 0, 0, 1, 6, 1, 1, 1, 1, 7}, uint64(8))

	outcomes := []domain.Phase{
		domain.PhaseRunning, // 0: still running
		domain.PhaseSucceeded,
		domain.PhaseFailed,
		domain.PhaseAborted,
		domain.PhaseTimedOut,
		domain.PhaseWorkerFailed,
		domain.PhasePaused, // 6: suspended, resumes later
		domain.PhaseUnschedulable,
	}

	f.Fuzz(func(t *testing.T, nSteps uint8, dag bool, deps, script []byte, seed uint64) {
		n := int(nSteps%24) + 1
		spec := randomSpec(n, dag, deps, seed)
		require.Empty(t, validate(spec), "the generated spec must be valid")
		pos := map[string]int{}
		for i, s := range spec.Steps {
			pos[s.Name] = i
		}

		status := map[string]domain.StepStatus{}
		everStarted := map[string]bool{}
		var p domain.Progress
		for iter := 0; ; iter++ {
			require.Less(t, iter, 4*n+8, "the run did not end")
			p = domain.Evaluate(spec, status, false, nil)

			failed := false
			for _, s := range spec.Steps {
				if x := status[s.Name]; x.Started && x.Phase.IsTerminal() && !x.Phase.IsSuccess() {
					failed = true
				}
			}
			if failed {
				require.Empty(t, p.Start, "fail fast: no new step starts after a failure")
			}
			for _, name := range p.Start {
				_, ok := pos[name]
				require.True(t, ok, "started unknown step %q", name)
				require.False(t, everStarted[name], "step %q started twice", name)
				require.False(t, status[name].Phase.IsTerminal(), "started a step already in %s", status[name].Phase)
				require.NotContains(t, p.Skip, name)
				everStarted[name] = true
				i := pos[name]
				if dag {
					for _, d := range spec.Steps[i].DependsOn {
						require.True(t, status[d].Phase.IsSuccess(), "%q started before its dependency %q succeeded (%s)", name, d, status[d].Phase)
					}
				} else if i > 0 {
					require.True(t, status[spec.Steps[i-1].Name].Phase.IsSuccess(), "StepByStep: %q started before its predecessor succeeded", name)
				}
			}
			require.True(t, slices.IsSortedFunc(p.Start, func(a, b string) int { return pos[a] - pos[b] }), "Start not in spec order: %v", p.Start)
			for _, name := range p.Skip {
				require.False(t, status[name].Started, "skipped a started step %q", name)
				require.True(t, failed, "skipped %q without a failure", name)
			}

			for _, name := range p.Start {
				status[name] = domain.StepStatus{Started: true, Phase: domain.PhaseRunning}
			}
			for _, name := range p.Skip {
				status[name] = domain.StepStatus{Phase: domain.PhaseSkipped}
			}

			if !dag {
				live := 0
				for _, x := range status {
					if x.Started && !x.Phase.IsTerminal() {
						live++
					}
				}
				require.LessOrEqual(t, live, 1, "StepByStep runs one step at a time")
			}

			if p.Phase.IsTerminal() {
				break
			}
			require.Contains(t, []domain.Phase{domain.PhaseRunning, domain.PhaseQueued, domain.PhasePaused}, p.Phase)

			// End running steps per the script; at least one ends each round.
			progressed := false
			var live []string
			for _, s := range spec.Steps {
				if x := status[s.Name]; x.Started && !x.Phase.IsTerminal() {
					live = append(live, s.Name)
				}
			}
			require.NotEmpty(t, live, "run %s with nothing running and nothing started", p.Phase)
			for _, name := range live {
				out := domain.PhaseSucceeded
				if len(script) > 0 {
					out, script = outcomes[int(script[0])%len(outcomes)], script[1:]
				}
				status[name] = domain.StepStatus{Started: true, Phase: out}
				progressed = progressed || out.IsTerminal()
			}
			if !progressed {
				status[live[0]] = domain.StepStatus{Started: true, Phase: domain.PhaseSucceeded}
			}
		}

		// The run ended.
		require.Empty(t, p.Start)
		var firstFailure domain.Phase
		for _, s := range spec.Steps {
			x := status[s.Name]
			require.True(t, x.Phase.IsTerminal(), "run %s but step %q is %s", p.Phase, s.Name, x.Phase)
			if !x.Phase.IsSuccess() && firstFailure == "" {
				firstFailure = x.Phase
			}
			if x.Phase == domain.PhaseSucceeded {
				require.True(t, everStarted[s.Name], "step %q succeeded without starting", s.Name)
			}
		}
		if firstFailure == "" {
			require.Equal(t, domain.PhaseSucceeded, p.Phase)
			for _, s := range spec.Steps {
				require.True(t, everStarted[s.Name], "run SUCCEEDED but step %q never ran", s.Name)
			}
		} else {
			require.Equal(t, firstFailure, p.Phase, "the run takes the first failure's phase (in spec order)")
		}
	})
}
