package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	dom "github.com/capstan-run/capstan/pkg/domain"
	"github.com/stretchr/testify/require"
)

// workflowStep is a step of kind workflow running template.
func workflowStep(name, template string) api.Step {
	return api.Step{Name: name, Kind: ptr("workflow"), Workflow: &api.WorkflowRef{Name: template}}
}

// childNames returns the names of run's child runs.
func childNames(r *api.Run) []string {
	if r.Children == nil {
		return nil
	}
	var out []string
	for _, c := range *r.Children {
		out = append(out, c.Name)
	}
	return out
}

// TestSubWorkflows runs templates as child runs on a real stack: an input
// becomes the child's param and the child's declared output the step's,
// which a later step reads; a failing child fails its step after the
// step's retries, each a new child; bad references are refused with 422.
func TestSubWorkflows(t *testing.T) {
	s := Start(t, bins, Options{})
	ctx := context.Background()
	number := api.ParamType("number")
	pushTemplate(t, s, "double", api.WorkflowSpec{
		Params:  &[]api.Param{{Name: "N", Type: &number, Required: ptr(true)}},
		Steps:   []api.Step{{Name: "count", Command: ptr(`echo $((N * 2)) > "$CAPSTAN_OUTPUTS_DIR/twice"`), Outputs: &[]string{"twice"}}},
		Outputs: &[]api.SpecOutput{{Name: "result", From: "count.twice"}},
	})
	pushTemplate(t, s, "broken", api.WorkflowSpec{Steps: []api.Step{{Name: "fail", Command: ptr("exit 3")}}})

	t.Run("outputs flow from the child to the parent", func(t *testing.T) {
		child := workflowStep("child", "double")
		child.Inputs = &[]api.StepInput{{From: "make.n", As: "N"}}
		child.Outputs = &[]string{"result"}
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{
			{Name: "make", Command: ptr(`echo 21 > "$CAPSTAN_OUTPUTS_DIR/n"`), Outputs: &[]string{"n"}},
			child,
			{Name: "show", Inputs: &[]api.StepInput{{From: "child.result", As: "R"}}, Command: ptr(`test "$(echo $R)" = 42`)},
		}})
		run := waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
		require.Equal(t, map[string]string{"result": "42"}, *action(run, "child").Outputs)
		require.Equal(t, []string{name + "-child-0"}, childNames(run))
		kid := getRun(t, s, name+"-child-0")
		require.Equal(t, &api.RunParent{Run: name, Action: "child"}, kid.Parent)
		require.Equal(t, 1, *kid.Depth)
		require.Equal(t, api.ParamValues{"N": float64(21)}, *kid.Params)
		require.Equal(t, &api.WorkflowVersionRef{Name: "double", Version: 1}, kid.Workflow)
	})

	t.Run("a failed child fails its step after its retries", func(t *testing.T) {
		step := workflowStep("w", "broken")
		step.MaxRetriesFailure = ptr(1)
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{step}})
		run := waitPhase(t, s, name, 60*time.Second, api.PhaseFAILED)
		require.Equal(t, []string{name + "-w-0", name + "-w-0-r1"}, childNames(run), "a retry is a new child")
		for _, c := range *run.Children {
			require.Equal(t, api.PhaseFAILED, c.Phase, c.Name)
		}
		w := action(run, "w")
		require.Equal(t, api.PhaseFAILED, w.Phase)
		require.Contains(t, *w.Reason, name+"-w-0-r1")
	})

	t.Run("suspend and resume of the parent reach the child", func(t *testing.T) {
		pushTemplate(t, s, "two-steps", api.WorkflowSpec{Steps: []api.Step{
			{Name: "a", Command: ptr("sleep 2")}, {Name: "b", Command: ptr("true")}}})
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{workflowStep("child", "two-steps")}})
		kid := name + "-child-0"
		s.Eventually(60*time.Second, "the child's first step running", func() bool {
			return slices.Contains(childNames(getRun(t, s, name)), kid) &&
				action(getRun(t, s, kid), "a").Phase == api.PhaseRUNNING
		})
		resp, err := s.Client.SuspendRunWithResponse(ctx, project, domain, name, api.RunSignalRequest{})
		require.NoError(t, err)
		require.NotNil(t, resp.JSON202, "suspend: %d %s", resp.StatusCode(), resp.Body)
		paused := waitPhase(t, s, kid, 30*time.Second, api.PhasePAUSED)
		require.Equal(t, api.PhaseSUCCEEDED, action(paused, "a").Phase, "the running step finished")
		require.Nil(t, action(paused, "b").StartedAt, "no step starts while suspended")
		resumeRun(t, s, name)
		waitPhase(t, s, kid, 30*time.Second, api.PhaseSUCCEEDED)
		waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
	})

	t.Run("bad references are refused with 422 naming the field", func(t *testing.T) {
		pushTemplate(t, s, "loop-b", api.WorkflowSpec{Steps: []api.Step{{Name: "x", Command: ptr("true")}}})
		pushTemplate(t, s, "loop-a", api.WorkflowSpec{Steps: []api.Step{workflowStep("b", "loop-b")}})
		resp, err := s.Client.PushWorkflowWithResponse(ctx, project, domain, api.PushWorkflowRequest{Name: "loop-b",
			Spec: api.WorkflowSpec{Steps: []api.Step{workflowStep("a", "loop-a")}}})
		require.NoError(t, err)
		require.NotNil(t, resp.ApplicationproblemJSON422, "%d %s", resp.StatusCode(), resp.Body)
		require.Contains(t, string(resp.Body), `"field":"spec.steps[0].workflow.name"`)
		require.Contains(t, *resp.ApplicationproblemJSON422.Detail, "template cycle: loop-b -> loop-a -> loop-b")

		unknownParam := workflowStep("c", "double")
		unknownParam.Params = &api.ParamValues{"N": 1, "M": 2}
		onTask := api.Step{Name: "t", Command: ptr("true"), Workflow: &api.WorkflowRef{Name: "double"}}
		withPlugin := workflowStep("p", "broken")
		withPlugin.Command = ptr("true")
		for spec, field := range map[string]api.WorkflowSpec{
			"spec.steps[0].workflow.name": {Steps: []api.Step{workflowStep("c", "nowhere")}},
			"spec.steps[0].params.M":      {Steps: []api.Step{unknownParam}},
			"spec.steps[0].params":        {Steps: []api.Step{workflowStep("c", "double")}},
			"spec.steps[0].workflow":      {Steps: []api.Step{onTask}},
			"spec.steps[0].command":       {Steps: []api.Step{withPlugin}},
		} {
			resp, err := s.Client.CreateRunWithResponse(ctx, project, domain, nil, api.CreateRunRequest{Spec: &field})
			require.NoError(t, err)
			require.NotNil(t, resp.ApplicationproblemJSON422, "%s: %d %s", spec, resp.StatusCode(), resp.Body)
			require.Contains(t, string(resp.Body), `"field":"`+spec+`"`, spec)
		}
	})
}

// descendants returns every run below name, depth first.
func descendants(t *testing.T, s *Stack, name string) []*api.Run {
	var out []*api.Run
	for _, c := range childNames(getRun(t, s, name)) {
		out = append(out, getRun(t, s, c))
		out = append(out, descendants(t, s, c)...)
	}
	return out
}

// nestedSleepers pushes templates top → mid → leaf, where top runs mid
// twice and mid runs leaf twice, and leaf's only step runs `sleep 600`; it
// starts a run of top and returns it with the pids of its four
// grandchildren's sleeps, once all of them run.
func nestedSleepers(t *testing.T, s *Stack, prefix string) (string, []int) {
	t.Helper()
	leaf, mid, top := prefix+"-leaf", prefix+"-mid", prefix+"-top"
	pushTemplate(t, s, leaf, api.WorkflowSpec{Steps: []api.Step{{Name: "s", Command: sleeper("sleep.pid")}}})
	two := func(template string) api.WorkflowSpec {
		return api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{workflowStep("x", template), workflowStep("y", template)}}
	}
	pushTemplate(t, s, mid, two(leaf))
	pushTemplate(t, s, top, two(mid))
	resp, err := s.Client.CreateRunWithResponse(context.Background(), project, domain, nil,
		api.CreateRunRequest{Workflow: &api.WorkflowRef{Name: top}})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON201, "%d %s", resp.StatusCode(), resp.Body)
	name := resp.JSON201.Name
	var leaves []string
	s.Eventually(60*time.Second, "four grandchildren running", func() bool {
		leaves = leaves[:0]
		for _, r := range descendants(t, s, name) {
			if *r.Depth == 2 && r.Phase == api.PhaseRUNNING {
				leaves = append(leaves, r.Name)
			}
		}
		return len(leaves) == 4
	})
	var pids []int
	for _, l := range leaves {
		pids = append(pids, pidIn(t, s, filepath.Join(runDir(s, l), "sleep.pid")))
	}
	return name, pids
}

// requireAllAborted checks that the run and every descendant ended ABORTED.
func requireAllAborted(t *testing.T, s *Stack, name string, timeout time.Duration) {
	t.Helper()
	s.Eventually(timeout, "every descendant of "+name+" ABORTED", func() bool {
		if getRun(t, s, name).Phase != api.PhaseABORTED {
			return false
		}
		all := descendants(t, s, name)
		for _, r := range all {
			if r.Phase != api.PhaseABORTED {
				return false
			}
		}
		return len(all) == 6
	})
}

// TestSubWorkflowAbort aborts a run whose grandchildren run sleeps: the
// abort cascades through the abort reconciler to every descendant, all end
// ABORTED and no process survives, also when the reconciler is killed
// with -9 mid-cascade (the grandchildren's kills failing at the executor's
// proxy, their processes alive) and restarted.
func TestSubWorkflowAbort(t *testing.T) {
	proxy := NewFaultProxy(t)
	s := Start(t, bins, Options{Executors: 1, ExecutorEnv: func(int) []string { return quietExecutor(proxy) },
		Env: []string{"CAPSTAN_WORKER_GRACE=10m"}})

	t.Run("two levels deep", func(t *testing.T) {
		name, pids := nestedSleepers(t, s, "plain")
		start := time.Now()
		abortRun(t, s, name, "stop the tree")
		s.Eventually(10*time.Second, "every sleep gone", func() bool { return allGone(pids) })
		t.Logf("abort of a run with 4 grandchildren: every process gone %s after the 202", time.Since(start).Round(time.Millisecond))
		requireAllAborted(t, s, name, 10*time.Second)
		for _, r := range descendants(t, s, name) {
			require.Contains(t, *action(r, "a0").Abort.Reason, "aborted: ", r.Name)
		}
	})

	t.Run("kill -9 of the abort reconciler mid-cascade", func(t *testing.T) {
		name, pids := nestedSleepers(t, s, "crash")
		var leaves []*api.Run
		for _, r := range descendants(t, s, name) {
			if *r.Depth == 2 {
				leaves = append(leaves, r)
				for _, task := range action(r, "s").Tasks {
					for _, a := range task.Attempts {
						proxy.Plan(a.Id, FaultPlan{Fail: 1 << 20})
					}
				}
			}
		}
		abortRun(t, s, name, "crash mid-cascade")
		s.Eventually(20*time.Second, "every grandchild's kill tried and failed", func() bool {
			for _, l := range leaves {
				if dbAbort(t, s, l.Name).AbortAttemptCount == 0 {
					return false
				}
			}
			return true
		})
		s.Kill("abort-reconciler")
		require.Zero(t, gone(pids), "the grandchildren's processes run on")
		for _, l := range leaves {
			for _, task := range action(l, "s").Tasks {
				for _, a := range task.Attempts {
					proxy.Plan(a.Id, FaultPlan{})
				}
			}
		}
		s.StartService("abort-reconciler")
		start := time.Now()
		s.Eventually(120*time.Second, "every sleep gone", func() bool { return allGone(pids) })
		t.Logf("after the restart every process was gone in %s", time.Since(start).Round(time.Millisecond))
		requireAllAborted(t, s, name, 30*time.Second)
	})
}

// gone counts the pids whose process is gone.
func gone(pids []int) int {
	n := 0
	for _, p := range pids {
		if ProcessGone(p) {
			n++
		}
	}
	return n
}

// TestSubWorkflowForEach fans a workflow step out over a list an earlier
// step writes: a child run per item, the item as the child's param, at
// most max_parallel children unfinished at once (sampled every 20 ms),
// their outputs gathered as arrays in index order; an empty list succeeds
// with empty arrays; an abort of the parent ends every child ABORTED; a
// for_each.as the template does not declare is refused with 422.
func TestSubWorkflowForEach(t *testing.T) {
	s := Start(t, bins, Options{Executors: 2})
	ctx := context.Background()
	number := api.ParamType("number")
	pushTemplate(t, s, "square", api.WorkflowSpec{
		Params:  &[]api.Param{{Name: "N", Type: &number, Required: ptr(true)}},
		Steps:   []api.Step{{Name: "sq", Command: ptr(`sleep 0.3; echo $((N * N)) > "$CAPSTAN_OUTPUTS_DIR/v"`), Outputs: &[]string{"v"}}},
		Outputs: &[]api.SpecOutput{{Name: "result", From: "sq.v"}},
	})
	pushTemplate(t, s, "nap", api.WorkflowSpec{
		Params: &[]api.Param{{Name: "N", Type: &number, Required: ptr(true)}},
		Steps:  []api.Step{{Name: "s", Command: ptr("sleep 600")}},
	})

	t.Run("a child per item, max_parallel children at once", func(t *testing.T) {
		each := workflowStep("each", "square")
		each.ForEach = &api.ForEach{From: ptr("make.list"), As: ptr("N"), MaxParallel: ptr(2)}
		each.Outputs = &[]string{"result"}
		name := create(t, s, api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
			{Name: "make", Command: ptr(`echo '[1, 2, 3, 4, 5, 6]' > "$CAPSTAN_OUTPUTS_DIR/list"`), Outputs: &[]string{"list"}},
			each,
		}})
		most := 0
		var run *api.Run
		s.Eventually(120*time.Second, "run "+name+" ends", func() bool {
			run = getRun(t, s, name)
			live := 0
			if run.Children != nil {
				for _, c := range *run.Children {
					if !dom.Phase(c.Phase).IsTerminal() {
						live++
					}
				}
			}
			if live > 2 {
				require.Failf(t, "max_parallel 2", "%d children unfinished: %+v", live, *run.Children)
			}
			most = max(most, live)
			return run.EndedAt != nil
		})
		require.Equal(t, api.PhaseSUCCEEDED, run.Phase)
		require.Equal(t, 2, most, "two children ran at once")
		var want []string
		for i := range 6 {
			want = append(want, fmt.Sprintf("%s-each-%d", name, i))
		}
		require.ElementsMatch(t, want, childNames(run), "a child per item")
		require.Equal(t, `["1","4","9","16","25","36"]`, (*action(run, "each").Outputs)["result"],
			"outputs in index order")
		require.Equal(t, api.ParamValues{"N": float64(2)}, *getRun(t, s, name+"-each-1").Params, "item 1 as param N")
	})

	t.Run("an empty list succeeds with empty arrays", func(t *testing.T) {
		each := workflowStep("each", "square")
		each.ForEach = &api.ForEach{Items: &[]any{}, As: ptr("N")}
		each.Outputs = &[]string{"result"}
		run := waitPhase(t, s, create(t, s, api.WorkflowSpec{Steps: []api.Step{each}}), 60*time.Second, api.PhaseSUCCEEDED)
		require.Equal(t, map[string]string{"result": "[]"}, *action(run, "each").Outputs)
		require.Empty(t, childNames(run))
	})

	t.Run("an abort of the parent ends every child", func(t *testing.T) {
		each := workflowStep("each", "nap")
		each.ForEach = &api.ForEach{Items: &[]any{1, 2, 3}, As: ptr("N")}
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{each}})
		s.Eventually(60*time.Second, "three children running", func() bool {
			running := 0
			for _, c := range childNames(getRun(t, s, name)) {
				if getRun(t, s, c).Phase == api.PhaseRUNNING {
					running++
				}
			}
			return running == 3
		})
		abortRun(t, s, name, "enough")
		s.Eventually(30*time.Second, "the run and its children ABORTED", func() bool {
			run := getRun(t, s, name)
			for _, c := range *run.Children {
				if c.Phase != api.PhaseABORTED {
					return false
				}
			}
			return run.Phase == api.PhaseABORTED
		})
	})

	t.Run("an as the template does not declare is refused", func(t *testing.T) {
		each := workflowStep("each", "square")
		each.ForEach = &api.ForEach{Items: &[]any{1}, As: ptr("M")}
		spec := api.WorkflowSpec{Steps: []api.Step{each}}
		resp, err := s.Client.CreateRunWithResponse(ctx, project, domain, nil, api.CreateRunRequest{Spec: &spec})
		require.NoError(t, err)
		require.Equal(t, 422, resp.StatusCode(), "%s", resp.Body)
		require.Contains(t, string(resp.Body), `"field":"spec.steps[0].for_each.as"`, "%s", resp.Body)
	})
}
