package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// TestWorkflowTemplates runs a template by name on a real stack: every task
// gets the params as environment variables, conditions read them with their
// types, a new version pushed while the run waits at its gate leaves the
// run's spec and version as they were, and a restart of the failed run
// reruns the recorded version (the new one has no step "check").
func TestWorkflowTemplates(t *testing.T) {
	s := Start(t, bins, Options{})
	ctx := context.Background()
	push := func(spec api.WorkflowSpec, params []api.Param) *api.WorkflowTemplate {
		t.Helper()
		body := api.PushWorkflowRequest{Name: "greet", Spec: spec}
		if params != nil {
			body.Params = &params
		}
		resp, err := s.Client.PushWorkflowWithResponse(ctx, project, domain, body)
		require.NoError(t, err)
		require.NotNil(t, resp.JSON201, "push: %d %s", resp.StatusCode(), resp.Body)
		return resp.JSON201
	}
	number := api.ParamType("number")
	show := []string{"show"}
	v1 := push(api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "show", Command: ptr(`echo "to=$TARGET times=$COUNT"`)},
		{Name: "many", DependsOn: &show, If: ptr(`params.COUNT > 2`), Command: ptr(`echo many`)},
		{Name: "few", DependsOn: &show, If: ptr(`params.COUNT <= 2`), Command: ptr(`echo few`)},
		{Name: "gate", DependsOn: &show, Kind: ptr("approval")},
		{Name: "check", DependsOn: &[]string{"gate"}, Command: failsOnce("tried")},
	}}, []api.Param{{Name: "TARGET", Required: ptr(true)}, {Name: "COUNT", Type: &number, Default: 3}})
	require.Equal(t, 1, v1.Version)

	resp, err := s.Client.CreateRunWithResponse(ctx, project, domain, nil, api.CreateRunRequest{
		Workflow: &api.WorkflowRef{Name: "greet"}, Params: &api.ParamValues{"TARGET": "world"}})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON201, "create: %d %s", resp.StatusCode(), resp.Body)
	name := resp.JSON201.Name
	before := waitStep(t, s, name, "gate", 30*time.Second, api.PhasePAUSED)

	v2 := push(api.WorkflowSpec{Steps: []api.Step{{Name: "other", Command: ptr("echo v2")}}}, nil)
	require.Equal(t, 2, v2.Version)
	after := getRun(t, s, name)
	require.Equal(t, before.Spec, after.Spec, "the push leaves the run's spec as it was")
	require.Equal(t, &api.WorkflowVersionRef{Name: "greet", Version: 1}, after.Workflow)

	code, _ := decide(t, s, name, "gate", true, api.ApprovalRequest{By: ptr("ann")})
	require.Equal(t, 202, code)
	run := waitPhase(t, s, name, 30*time.Second, api.PhaseFAILED)
	require.Contains(t, logs(t, s, name, "show", 0, 1), "to=world times=3\n")
	require.Equal(t, api.PhaseSUCCEEDED, action(run, "many").Phase)
	require.Equal(t, api.PhaseSKIPPED, action(run, "few").Phase)
	require.Equal(t, api.PhaseFAILED, action(run, "check").Phase)

	restartRun(t, s, name, "check")
	waitRun(t, s, name, 30*time.Second, "restart applied", func(r *api.Run) bool {
		return *action(r, "check").Generation == 1
	})
	run = waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
	require.Equal(t, &api.WorkflowVersionRef{Name: "greet", Version: 1}, run.Workflow)
	require.Equal(t, 1, *action(run, "check").Generation, "the restart reran check, a step of version 1 only")
}
