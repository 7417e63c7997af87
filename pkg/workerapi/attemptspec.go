package workerapi

import (
	"cmp"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
)

// NewAttemptSpec is what an executor needs to run attempt id (its number,
// on workerID) of task idx of step's action key: the identity fields, and
// the step's plugin fields (wait_exit_code too), time limit, environment
// (Env, then SecretEnv), network and resources (the executor's sandbox
// limits the attempt to them). State is
// ASSIGNED and Proceed true; Inputs are left to the caller, which resolves
// them from their producers' outputs. Errors: a step's http or container
// block that does not convert to the API's form.
func NewAttemptSpec(id int64, number int, key domain.ActionKey, idx int, workerID *string,
	step domain.Step) (AttemptSpec, error) {
	out := AttemptSpec{
		Id: id, Number: number, Project: key.Project, Domain: key.Domain, Run: key.Run, Action: key.Action,
		TaskIndex: idx, Replicas: step.ReplicaCount(), Plugin: step.Plugin, Command: step.Command,
		Env: step.AttemptEnv(), State: api.TaskState(domain.TaskAssigned.String()), WorkerId: workerID, Proceed: true,
	}
	if len(step.Outputs) > 0 {
		out.Outputs = &step.Outputs
	}
	if len(step.Args) > 0 {
		out.Args = &step.Args
	}
	out.WaitExitCode = step.WaitExitCode
	grace := step.KillGraceDuration().Milliseconds()
	out.KillGraceMs = &grace
	if step.Network != "" {
		out.Network = &step.Network
	}
	if r := step.Resources; r != nil && (r.CPUMillis > 0 || r.MemoryBytes > 0) {
		out.Resources = &api.Resources{CpuMillis: &r.CPUMillis, MemoryBytes: &r.MemoryBytes}
	}
	if d := cmp.Or(step.AttemptTimeoutDuration(), step.TimeoutDuration()); d > 0 {
		ms := d.Milliseconds()
		out.TimeoutMs = &ms
	}
	if step.HTTP != nil {
		out.Http = new(api.HTTPSpec)
		if err := api.ConvertJSON(step.HTTP, out.Http); err != nil {
			return AttemptSpec{}, err
		}
	}
	if step.Container != nil {
		out.Container = new(api.ContainerSpec)
		if err := api.ConvertJSON(step.Container, out.Container); err != nil {
			return AttemptSpec{}, err
		}
	}
	if step.Kubernetes != nil {
		out.Kubernetes = new(api.KubernetesSpec)
		if err := api.ConvertJSON(step.Kubernetes, out.Kubernetes); err != nil {
			return AttemptSpec{}, err
		}
	}
	return out, nil
}

// WithItem adds a for_each task's item (nil: a replica, nothing) to its
// attempt's inputs, as the input named by the step's for_each.as: the
// executor gives it as that environment variable and the file
// $CAPSTAN_INPUTS_DIR/<as>.
func WithItem(spec *AttemptSpec, step domain.Step, item *string) {
	if item == nil || step.ForEach == nil {
		return
	}
	in := map[string]string{}
	if spec.Inputs != nil {
		in = *spec.Inputs
	}
	in[step.ForEach.EnvName()] = *item
	spec.Inputs = &in
}
