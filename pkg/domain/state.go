// Package domain holds Capstan's rules as pure functions with no I/O: task
// states and retry budgets (Iris), action phase derivation, workflow specs and
// their validation, workflow progression (KubeVela's DAG and StepByStep) and
// backoff policies.
package domain

import "fmt"

// TaskState is the state of a task or of one attempt of it. Names and numeric
// values follow the Iris task-states reference exactly; the database stores
// the numbers and the API the names.
type TaskState int32

// Task states, with the values of the state table in Iris's task-states
// reference.
const (
	TaskUnspecified   TaskState = 0
	TaskPending       TaskState = 1
	TaskBuilding      TaskState = 2
	TaskRunning       TaskState = 3
	TaskSucceeded     TaskState = 4
	TaskFailed        TaskState = 5
	TaskKilled        TaskState = 6
	TaskWorkerFailed  TaskState = 7
	TaskUnschedulable TaskState = 8
	TaskAssigned      TaskState = 9
	TaskPreempted     TaskState = 10
)

var taskStateNames = map[TaskState]string{
	TaskUnspecified:   "UNSPECIFIED",
	TaskPending:       "PENDING",
	TaskBuilding:      "BUILDING",
	TaskRunning:       "RUNNING",
	TaskSucceeded:     "SUCCEEDED",
	TaskFailed:        "FAILED",
	TaskKilled:        "KILLED",
	TaskWorkerFailed:  "WORKER_FAILED",
	TaskUnschedulable: "UNSCHEDULABLE",
	TaskAssigned:      "ASSIGNED",
	TaskPreempted:     "PREEMPTED",
}

// String returns the Iris name, e.g. "WORKER_FAILED".
func (s TaskState) String() string {
	if n, ok := taskStateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("TaskState(%d)", int32(s))
}

// ParseTaskState maps an Iris name to its state; ok is false for unknown names.
func ParseTaskState(name string) (TaskState, bool) {
	for s, n := range taskStateNames {
		if n == name {
			return s, true
		}
	}
	return TaskUnspecified, false
}

// IsTerminal reports whether an attempt in state s has ended (Iris
// TERMINAL_TASK_STATES). A task whose attempt ended in a retriable state
// with budget left is requeued to PENDING instead (HandleAttemptResult).
func (s TaskState) IsTerminal() bool {
	switch s {
	case TaskSucceeded, TaskFailed, TaskKilled, TaskWorkerFailed, TaskUnschedulable, TaskPreempted:
		return true
	}
	return false
}

// IsLive reports whether an attempt in state s holds or may hold a process on
// a worker: ASSIGNED, BUILDING or RUNNING.
func (s TaskState) IsLive() bool {
	return s == TaskAssigned || s == TaskBuilding || s == TaskRunning
}

// IsCurrentAttempt reports whether attempt number n, in state attempt, is
// still the current try of its task (state task, attemptCount attempts
// made): both live and the attempt the latest. Only such an attempt may run
// on; an executor holding any other stops it.
func IsCurrentAttempt(attempt, task TaskState, n, attemptCount int) bool {
	return attempt.IsLive() && task.IsLive() && attemptCount == n
}

// CanReport reports whether an executor may report state next for an attempt
// in state cur: attempts only move forward, ASSIGNED → BUILDING → RUNNING →
// a terminal state (Iris's worker-reported transitions; a PENDING report is
// never taken, so an ASSIGNED task does not regress).
func CanReport(cur, next TaskState) bool {
	switch {
	case cur.IsTerminal():
		return false
	case next.IsTerminal():
		return true
	case next == TaskRunning:
		return true
	case next == TaskBuilding:
		return cur != TaskRunning
	}
	return false
}
