package server

import (
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

func toRunSummary(r store.Run) api.RunSummary {
	out := api.RunSummary{Project: r.Project, Domain: r.Domain, Name: r.Name, Phase: api.Phase(r.Phase),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, EndedAt: r.EndedAt, Schedule: r.ScheduleName,
		ScheduledAt: r.ScheduledAt, Trigger: r.TriggerName, EventId: r.EventID, ConcurrencyKey: r.ConcurrencyKey,
		PendingReason: r.PendingReason, ExpiresAt: r.ExpiresAt}
	if r.WorkflowName != nil && r.WorkflowVersion != nil {
		out.Workflow = &api.WorkflowVersionRef{Name: *r.WorkflowName, Version: *r.WorkflowVersion}
	}
	if p, ok := r.Parent(); ok {
		out.Parent = &api.RunParent{Run: p.Run, Action: p.Action}
	}
	out.Depth = &r.Depth
	return out
}

// toRun is a run with its actions, each with its outputs from outs (step
// name → output name → value).
func toRun(d store.RunDetail, outs map[string]map[string]string) api.Run {
	s := toRunSummary(d.Run)
	var spec api.WorkflowSpec
	_ = api.ConvertJSON(d.Run.Spec.Masked(), &spec) // the API type mirrors the domain's; never a secret
	suspended := d.Run.SuspendRequestedAt != nil
	out := api.Run{Project: s.Project, Domain: s.Domain, Name: s.Name, Phase: s.Phase, CreatedAt: s.CreatedAt,
		UpdatedAt: s.UpdatedAt, EndedAt: s.EndedAt, Spec: spec, Suspended: &suspended,
		Workflow: s.Workflow, Schedule: s.Schedule, ScheduledAt: s.ScheduledAt, Trigger: s.Trigger, EventId: s.EventId,
		ConcurrencyKey: s.ConcurrencyKey, PendingReason: s.PendingReason, Parent: s.Parent, Depth: s.Depth, ExpiresAt: s.ExpiresAt,
		Actions: make([]api.Action, len(d.Actions))}
	if d.Run.Params != nil {
		params := api.ParamValues(d.Run.Params)
		out.Params = &params
	}
	for i, a := range d.Actions {
		out.Actions[i] = withOutputs(toAction(a), outs[a.Action.Name])
	}
	return out
}

// toAction is an action with its page of tasks, its task counts by state
// name and the cursor of its next page.
func toAction(d store.ActionDetail) api.Action {
	a := d.Action
	out := api.Action{Name: a.Name, Kind: a.Kind, Parent: a.ParentActionName, Phase: api.Phase(a.Phase),
		StartedAt: a.StartedAt, EndedAt: a.EndedAt, StepRetries: &a.FailedTimes, Generation: &a.Generation,
		WaitingFor: a.WaitingFor, NotBefore: a.NotBefore, PausedAt: a.PausedAt, Reason: a.Reason,
		Approval: approval(a), Tasks: make([]api.Task, len(d.Tasks))}
	if len(a.DependsOn) > 0 {
		deps := []string(a.DependsOn)
		out.DependsOn = &deps
	}
	if a.AbortRequestedAt != nil || a.AbortOutcome != nil || a.AbortAttemptCount > 0 {
		out.Abort = &api.AbortStatus{RequestedAt: a.AbortRequestedAt, Reason: a.AbortReason, Cause: a.AbortCause,
			AttemptCount: a.AbortAttemptCount, Outcome: a.AbortOutcome}
	}
	out.CacheKey = a.CacheKey
	if a.CacheStatus != nil {
		st := api.ActionCacheStatus(*a.CacheStatus)
		out.CacheStatus = &st
	}
	for i, t := range d.Tasks {
		out.Tasks[i] = toTask(t)
	}
	out.TaskCount, out.TaskCounts = d.TaskCount, make(map[string]int, len(d.TaskCounts))
	for st, n := range d.TaskCounts {
		out.TaskCounts[st.String()] = n
	}
	if d.NextCursor != "" {
		out.TasksNextCursor = &d.NextCursor
	}
	return out
}

// approval is an approval step's decision, once made.
func approval(a store.Action) *api.Approval {
	if a.Decision == nil {
		return nil
	}
	at := a.UpdatedAt
	if a.DecidedAt != nil {
		at = *a.DecidedAt
	}
	return &api.Approval{Decision: api.ApprovalDecision(*a.Decision), By: a.DecidedBy, TokenId: a.DecidedByTokenID,
		TokenName: a.DecidedByTokenName, At: at, Comment: a.DecisionComment}
}

func toTask(d store.TaskDetail) api.Task {
	t := d.Task
	sys, maxSys := t.SystemFailureCount, t.MaxSystemFailures
	out := api.Task{Index: t.Idx, Generation: &t.Generation, State: taskState(t.State), FailureCount: t.FailureCount,
		PreemptionCount: t.PreemptionCount, SystemFailureCount: &sys, MaxSystemFailures: &maxSys,
		MaxRetriesFailure: t.MaxRetriesFailure, MaxRetriesPreemption: t.MaxRetriesPreemption, WorkerId: t.WorkerID,
		PendingReason: t.PendingReason, NotBefore: t.NotBefore, Item: t.Item, Attempts: make([]api.Attempt, len(d.Attempts))}
	if t.WaitCount > 0 {
		waits := t.WaitCount
		out.WaitCount, out.WaitingSince = &waits, t.WaitingSince
	}
	if t.Outputs != nil {
		out.Reused = &[]bool{true}[0]
	}
	for i, a := range d.Attempts {
		out.Attempts[i] = api.Attempt{Id: a.ID, Number: a.Number, State: taskState(a.State), WorkerId: a.WorkerID,
			ExitCode: a.ExitCode, Error: a.Error, Cause: a.Cause, Code: a.Code, CreatedAt: a.CreatedAt, StartedAt: a.StartedAt,
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

func taskState(s domain.TaskState) api.TaskState { return api.TaskState(s.String()) }

// workerState is what GET /v1/workers shows of a worker's state: dead once
// the scheduler's liveness pass declared it dead (until the row is purged),
// unresponsive while it is silent past grace but not declared dead yet,
// else alive.
func workerState(w store.Worker, grace time.Duration, now time.Time) api.WorkerState {
	switch {
	case w.State == store.WorkerDead:
		return api.WorkerStateDead
	case now.Sub(w.LastHeartbeatAt) > grace:
		return api.WorkerStateUnresponsive
	}
	return api.WorkerStateAlive
}

func toWorker(w store.WorkerLoad, grace time.Duration, now time.Time) api.Worker {
	labels := w.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	failures := w.Failures
	if failures == nil {
		failures = map[string]time.Time{}
	}
	free := max(w.Slots-w.Used, 0)
	res := api.Resources{CpuMillis: &w.CPUMillis, MemoryBytes: &w.MemoryBytes}
	freeCPU, freeMem := w.CPUMillis-w.UsedCPUMillis, w.MemoryBytes-w.UsedMemoryBytes
	return api.Worker{Id: w.ID, Name: w.Name, Address: w.Address, Slots: w.Slots, FreeSlots: &free, Labels: labels,
		Resources: &res, FreeResources: &api.Resources{CpuMillis: &freeCPU, MemoryBytes: &freeMem},
		State: workerState(w.Worker, grace, now), Draining: w.Draining, Sandbox: w.Sandbox, Failures: failures,
		LastFailureAt:  w.LastFailureAt,
		PlaceableAfter: w.PlaceableAfter, CreatedAt: w.CreatedAt, LastHeartbeatAt: w.LastHeartbeatAt}
}
