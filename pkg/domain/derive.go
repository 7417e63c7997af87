package domain

// JobView is what action (job) phase derivation reads: task counts by state
// and the job's settings.
type JobView struct {
	// Counts[s] is how many tasks are in state s.
	Counts [11]int
	// MaxTaskFailures is how many FAILED tasks the job tolerates (default 0).
	MaxTaskFailures int
	// KilledByTimeout is true when the job's kills were a timeout.
	KilledByTimeout bool
	// PendingReason is true when the scheduler knows why a task waits.
	PendingReason bool
	// Started is true when any task of the job ever started.
	Started bool
	// Waiting is true when a PENDING task waits for its target to be ready
	// (its last attempt answered waiting: DecideWait).
	Waiting bool
}

// Total is the number of tasks.
func (v JobView) Total() int {
	n := 0
	for _, c := range v.Counts {
		n += c
	}
	return n
}

// Count returns the number of tasks in state s.
func (v JobView) Count(s TaskState) int {
	if s < 0 || int(s) >= len(v.Counts) {
		return 0
	}
	return v.Counts[s]
}

// DeriveJobPhase derives an action's phase from its task counts by Iris's
// ordered job-state derivation (Iris's task-states reference), with Iris's
// job states mapped onto Capstan's phases (KILLED is ABORTED or TIMED_OUT,
// PENDING is QUEUED or WAITING_FOR_RESOURCES); earlier rules win:
//  1. all SUCCEEDED -> SUCCEEDED
//  2. FAILED count > max_task_failures -> FAILED
//  3. any UNSCHEDULABLE -> UNSCHEDULABLE
//  4. any KILLED -> ABORTED (TIMED_OUT when the kill was a timeout)
//  5. all finished, any WORKER_FAILED/PREEMPTED -> WORKER_FAILED
//  6. all finished, the rest SUCCEEDED or tolerated FAILED -> SUCCEEDED
//     (Capstan's addition: Iris leaves this case to fall through to PENDING)
//  7. any ASSIGNED/BUILDING/RUNNING -> RUNNING
//  8. a task waits for its target -> WAITING (Capstan's, KubeVela's
//     waiting step: nothing runs, it asks again after the backoff)
//  9. started before -> RUNNING
//  10. else QUEUED (WAITING_FOR_RESOURCES when a pending_reason is known)
//
// Tasks in FAILED, WORKER_FAILED or PREEMPTED are counted here only once
// their budget is spent: a retried task is back in PENDING.
func DeriveJobPhase(v JobView) Phase {
	total := v.Total()
	switch {
	case total > 0 && v.Count(TaskSucceeded) == total:
		return PhaseSucceeded
	case v.Count(TaskFailed) > v.MaxTaskFailures:
		return PhaseFailed
	case v.Count(TaskUnschedulable) > 0:
		return PhaseUnschedulable
	case v.Count(TaskKilled) > 0:
		if v.KilledByTimeout {
			return PhaseTimedOut
		}
		return PhaseAborted
	}
	lost := v.Count(TaskWorkerFailed) + v.Count(TaskPreempted)
	finished := v.Count(TaskSucceeded) + v.Count(TaskFailed) + lost
	if total > 0 && finished == total {
		if lost > 0 {
			return PhaseWorkerFailed
		}
		return PhaseSucceeded
	}
	switch {
	case v.Count(TaskAssigned)+v.Count(TaskBuilding)+v.Count(TaskRunning) > 0:
		return PhaseRunning
	case v.Waiting && v.Count(TaskPending) > 0:
		return PhaseWaiting
	case v.Started:
		return PhaseRunning
	}
	if v.PendingReason {
		return PhaseWaitingForResources
	}
	return PhaseQueued
}
