package server

import (
	"encoding/json"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

func toRunSummary(r store.Run) api.RunSummary {
	return api.RunSummary{Project: r.Project, Domain: r.Domain, Name: r.Name, Phase: api.Phase(r.Phase),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, EndedAt: r.EndedAt}
}

func toRun(d store.RunDetail) api.Run {
	s := toRunSummary(d.Run)
	var spec api.WorkflowSpec
	_ = json.Unmarshal(d.Run.Spec, &spec)
	out := api.Run{Project: s.Project, Domain: s.Domain, Name: s.Name, Phase: s.Phase, CreatedAt: s.CreatedAt,
		UpdatedAt: s.UpdatedAt, EndedAt: s.EndedAt, Spec: spec, Actions: make([]api.Action, len(d.Actions))}
	for i, a := range d.Actions {
		out.Actions[i] = toAction(a)
	}
	return out
}

func toAction(d store.ActionDetail) api.Action {
	a := d.Action
	out := api.Action{Name: a.Name, Kind: a.Kind, Parent: a.ParentActionName, Phase: api.Phase(a.Phase),
		StartedAt: a.StartedAt, EndedAt: a.EndedAt, Tasks: make([]api.Task, len(d.Tasks))}
	if len(a.DependsOn) > 0 {
		deps := []string(a.DependsOn)
		out.DependsOn = &deps
	}
	if a.AbortRequestedAt != nil || a.AbortOutcome != nil || a.AbortAttemptCount > 0 {
		out.Abort = &api.AbortStatus{RequestedAt: a.AbortRequestedAt, Reason: a.AbortReason, Cause: a.AbortCause,
			AttemptCount: a.AbortAttemptCount, Outcome: a.AbortOutcome}
	}
	for i, t := range d.Tasks {
		out.Tasks[i] = toTask(t)
	}
	return out
}

func toTask(d store.TaskDetail) api.Task {
	t := d.Task
	sys := t.SystemFailureCount
	out := api.Task{Index: t.Idx, State: taskState(t.State), FailureCount: t.FailureCount,
		PreemptionCount: t.PreemptionCount, SystemFailureCount: &sys, MaxRetriesFailure: t.MaxRetriesFailure,
		MaxRetriesPreemption: t.MaxRetriesPreemption, WorkerId: t.WorkerID, PendingReason: t.PendingReason,
		NotBefore: t.NotBefore, Attempts: make([]api.Attempt, len(d.Attempts))}
	for i, a := range d.Attempts {
		out.Attempts[i] = api.Attempt{Id: a.ID, Number: a.Number, State: taskState(a.State), WorkerId: a.WorkerID,
			ExitCode: a.ExitCode, Error: a.Error, Cause: a.Cause, CreatedAt: a.CreatedAt, StartedAt: a.StartedAt,
			FinishedAt: a.FinishedAt, Kill: killStatus(a)}
	}
	return out
}

// killStatus is an attempt's kill request, if one was ever made.
func killStatus(a store.Attempt) *api.AbortStatus {
	if a.KillRequestedAt == nil && a.KillOutcome == nil {
		return nil
	}
	return &api.AbortStatus{RequestedAt: a.KillRequestedAt, Cause: a.KillCause, AttemptCount: a.KillAttemptCount,
		Outcome: a.KillOutcome}
}

func taskState(s int16) api.TaskState { return api.TaskState(domain.TaskState(s).String()) }

func toWorker(w store.WorkerLoad, grace time.Duration, now time.Time) api.Worker {
	labels := map[string]string{}
	_ = json.Unmarshal(w.Labels, &labels)
	state := w.State
	if state == store.WorkerAlive && now.Sub(w.LastHeartbeatAt) > grace {
		state = "unresponsive"
	}
	free := max(w.Slots-w.Used, 0)
	res := api.Resources{CpuMillis: &w.CPUMillis, MemoryBytes: &w.MemoryBytes}
	freeCPU, freeMem := w.CPUMillis-w.UsedCPUMillis, w.MemoryBytes-w.UsedMemoryBytes
	return api.Worker{Id: w.ID, Name: w.Name, Address: w.Address, Slots: w.Slots, FreeSlots: &free, Labels: labels,
		Resources: &res, FreeResources: &api.Resources{CpuMillis: &freeCPU, MemoryBytes: &freeMem},
		State: state, Draining: w.Draining, Failures: failures(w.Failures), LastFailureAt: w.LastFailureAt,
		PlaceableAfter: w.PlaceableAfter, CreatedAt: w.CreatedAt, LastHeartbeatAt: w.LastHeartbeatAt}
}

// failures decodes a worker's failures map; a malformed one shows empty.
func failures(raw []byte) map[string]time.Time {
	m, err := store.DecodeFailures(raw)
	if err != nil {
		return map[string]time.Time{}
	}
	return m
}
