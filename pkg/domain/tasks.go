package domain

import "time"

// NewTask is one task a starting step creates (StepTasks): what placement
// and the retry rules read of it, so that neither reads the step again.
type NewTask struct {
	// Idx is the replica's index, 0 to the step's replicas - 1.
	Idx   int
	State TaskState
	// The task's budgets: MaxRetriesFailure for FAILED,
	// MaxRetriesPreemption for WORKER_FAILED and PREEMPTED,
	// MaxSystemFailures for system failures retried in place.
	MaxRetriesFailure    int
	MaxRetriesPreemption int
	MaxSystemFailures    int
	// What one attempt asks of a worker: its band, resources and labels,
	// placed with its siblings when Coscheduled, by Plugin.
	Priority    Priority
	Resources   Resources
	Constraints []Constraint
	Coscheduled bool
	Plugin      string
	// AttemptTimeout bounds each attempt; 0 for none.
	AttemptTimeout time.Duration
	// SchedulingDeadline is when a task still PENDING becomes
	// UNSCHEDULABLE; nil for never.
	SchedulingDeadline *time.Time
	// Item is a for_each task's item (ItemValue); nil for a replica.
	Item *string
}

// StepTasks returns the tasks of a starting task step, one per replica in
// index order, each PENDING with the step's budgets and scheduling fields:
// its retry limits (Iris's defaults where unset), its system-failure
// budget (the step's, else defaultSystemFailures), its request, its
// attempt timeout, and a scheduling deadline now + scheduling_timeout when
// it sets one. Each task has its own copy of the constraints. Iris:
// expand_job_to_tasks.
func StepTasks(step Step, defaultSystemFailures int, now time.Time) []NewTask {
	return stepTasks(step, step.ReplicaCount(), defaultSystemFailures, now)
}

// ForEachTasks returns the tasks of a starting for_each step as StepTasks
// does, one per item (ItemValue of each) in index order, each carrying its
// item.
func ForEachTasks(step Step, items []string, defaultSystemFailures int, now time.Time) []NewTask {
	tasks := stepTasks(step, len(items), defaultSystemFailures, now)
	for i := range tasks {
		tasks[i].Item = &items[i]
	}
	return tasks
}

func stepTasks(step Step, n, defaultSystemFailures int, now time.Time) []NewTask {
	req := step.Request()
	var deadline *time.Time
	if d := step.SchedulingTimeoutDuration(); d > 0 {
		at := now.Add(d)
		deadline = &at
	}
	tasks := make([]NewTask, n)
	for i := range tasks {
		tasks[i] = NewTask{Idx: i, State: TaskPending, MaxRetriesFailure: step.RetriesFailure(),
			MaxRetriesPreemption: step.RetriesPreemption(),
			MaxSystemFailures:    step.SystemFailuresAllowed(defaultSystemFailures),
			Priority:             req.Priority, Resources: req.Resources,
			Constraints: append([]Constraint{}, step.Constraints...), Coscheduled: step.Coscheduled,
			Plugin: step.Plugin, AttemptTimeout: step.AttemptTimeoutDuration(), SchedulingDeadline: deadline}
	}
	return tasks
}
