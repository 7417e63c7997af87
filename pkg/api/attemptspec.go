package api

import (
	"github.com/capstan-run/capstan/pkg/domain"
	gojson "github.com/goccy/go-json"
)

// NewAttemptSpec is what an executor needs to run attempt id (its number,
// on workerID) of task idx of step's action key: the identity fields, and
// the step's plugin fields and environment (Env, then SecretEnv). State is
// ASSIGNED and Proceed true; Inputs are left to the caller, which resolves
// them from their producers' outputs. Errors: a step's http or container
// block that does not convert to the API's form.
func NewAttemptSpec(id int64, number int, key domain.ActionKey, idx int, workerID *string,
	step domain.Step) (AttemptSpec, error) {
	out := AttemptSpec{
		Id: id, Number: number, Project: key.Project, Domain: key.Domain, Run: key.Run, Action: key.Action,
		TaskIndex: idx, Replicas: step.ReplicaCount(), Plugin: step.Plugin, Command: step.Command,
		Env: step.AttemptEnv(), State: TaskState(domain.TaskAssigned.String()), WorkerId: workerID, Proceed: true,
	}
	if len(step.Outputs) > 0 {
		out.Outputs = &step.Outputs
	}
	if len(step.Args) > 0 {
		out.Args = &step.Args
	}
	grace := step.KillGraceDuration().Milliseconds()
	out.KillGraceMs = &grace
	if step.HTTP != nil {
		out.Http = new(HTTPSpec)
		if err := convertJSON(step.HTTP, out.Http); err != nil {
			return AttemptSpec{}, err
		}
	}
	if step.Container != nil {
		out.Container = new(ContainerSpec)
		if err := convertJSON(step.Container, out.Container); err != nil {
			return AttemptSpec{}, err
		}
	}
	return out, nil
}

// convertJSON copies in into out through their JSON forms, with go-json
// as the api's conversions do.
func convertJSON(in, out any) error {
	raw, err := gojson.Marshal(in)
	if err != nil {
		return err
	}
	return gojson.Unmarshal(raw, out)
}
