package domain_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// jobOf builds a JobView from one state per task.
func jobOf(states ...domain.TaskState) domain.JobView {
	var v domain.JobView
	for _, s := range states {
		v.Counts[s]++
	}
	return v
}

func repeat(s domain.TaskState, n int) []domain.TaskState {
	out := make([]domain.TaskState, n)
	for i := range out {
		out[i] = s
	}
	return out
}

const (
	pend    = domain.TaskPending
	assign  = domain.TaskAssigned
	build   = domain.TaskBuilding
	run     = domain.TaskRunning
	succ    = domain.TaskSucceeded
	fail    = domain.TaskFailed
	kill    = domain.TaskKilled
	wfail   = domain.TaskWorkerFailed
	unsched = domain.TaskUnschedulable
	preempt = domain.TaskPreempted
)

func TestJobViewTotalAndCount(t *testing.T) {
	t.Parallel()
	v := jobOf(succ, succ, fail, run)
	require.Equal(t, 4, v.Total())
	require.Equal(t, 2, v.Count(succ))
	require.Equal(t, 1, v.Count(fail))
	require.Equal(t, 0, v.Count(kill))
	require.Equal(t, 0, v.Count(-1), "out of range state counts 0")
	require.Equal(t, 0, v.Count(11), "out of range state counts 0")
}

// The ordered job-state derivation of Iris's task-states reference, Iris's job
// states mapped onto Capstan's phases as DeriveJobPhase documents.
func TestDeriveJobPhase(t *testing.T) {
	t.Parallel()
	with := func(v domain.JobView, f func(*domain.JobView)) domain.JobView { f(&v); return v }
	tests := []struct {
		name string
		v    domain.JobView
		want domain.Phase
	}{
		// Rule 1.
		{"1. SUCCEEDED: All tasks are in TASK_STATE_SUCCEEDED (one task)", jobOf(succ), domain.PhaseSucceeded},
		{"1. SUCCEEDED: All tasks are in TASK_STATE_SUCCEEDED (three tasks)", jobOf(succ, succ, succ), domain.PhaseSucceeded},
		{"1. not all SUCCEEDED: one still RUNNING -> RUNNING", jobOf(succ, succ, run), domain.PhaseRunning},
		{"1. not all SUCCEEDED: one still PENDING and the job started -> RUNNING",
			with(jobOf(succ, pend), func(v *domain.JobView) { v.Started = true }), domain.PhaseRunning},

		// Rule 2.
		{"2. FAILED: Count of TASK_STATE_FAILED tasks exceeds max_task_failures (default 0)", jobOf(fail), domain.PhaseFailed},
		{"2. ordering: A job with one succeeded task and one failed task (beyond tolerance) is FAILED, not RUNNING",
			jobOf(succ, fail), domain.PhaseFailed},
		{"2. ordering: FAILED beyond tolerance wins over tasks still RUNNING",
			jobOf(fail, run, run), domain.PhaseFailed},
		{"2. FAILED count == max_task_failures is tolerated: others RUNNING -> RUNNING",
			with(jobOf(fail, run), func(v *domain.JobView) { v.MaxTaskFailures = 1 }), domain.PhaseRunning},
		{"2. FAILED count 2 > max_task_failures 1 -> FAILED",
			with(jobOf(fail, fail, run), func(v *domain.JobView) { v.MaxTaskFailures = 1 }), domain.PhaseFailed},
		{"2. ordering: FAILED (rule 2) before UNSCHEDULABLE (rule 3)", jobOf(fail, unsched), domain.PhaseFailed},
		{"2. ordering: FAILED (rule 2) before KILLED (rule 4): survivors are KILLED after the failure",
			jobOf(fail, kill, kill), domain.PhaseFailed},
		{"2. Only TASK_STATE_FAILED counts toward max_task_failures: WORKER_FAILED/PREEMPTED do not",
			with(jobOf(wfail, wfail, preempt, run), func(v *domain.JobView) { v.MaxTaskFailures = 0 }), domain.PhaseRunning},

		// Rule 3.
		{"3. UNSCHEDULABLE: Any task is TASK_STATE_UNSCHEDULABLE", jobOf(unsched, run, succ), domain.PhaseUnschedulable},
		{"3. UNSCHEDULABLE with tolerated FAILED -> UNSCHEDULABLE",
			with(jobOf(unsched, fail), func(v *domain.JobView) { v.MaxTaskFailures = 1 }), domain.PhaseUnschedulable},
		{"3. ordering: UNSCHEDULABLE (rule 3) before KILLED (rule 4): remaining tasks are killed",
			jobOf(unsched, kill, kill), domain.PhaseUnschedulable},

		// Rule 4.
		{"4. KILLED: Any task is TASK_STATE_KILLED -> ABORTED", jobOf(kill, run, succ), domain.PhaseAborted},
		{"4. KILLED by a timeout -> TIMED_OUT",
			with(jobOf(kill, succ), func(v *domain.JobView) { v.KilledByTimeout = true }), domain.PhaseTimedOut},
		{"4. ordering: KILLED (rule 4) before all-finished WORKER_FAILED (rule 5)", jobOf(kill, wfail), domain.PhaseAborted},
		{"4. KilledByTimeout without any KILLED task does not make TIMED_OUT",
			with(jobOf(run), func(v *domain.JobView) { v.KilledByTimeout = true }), domain.PhaseRunning},

		// Rule 5.
		{"5. all terminal and any are WORKER_FAILED -> JOB_STATE_WORKER_FAILED", jobOf(succ, wfail), domain.PhaseWorkerFailed},
		{"5. all terminal and any are PREEMPTED -> JOB_STATE_WORKER_FAILED", jobOf(preempt, succ, succ), domain.PhaseWorkerFailed},
		{"5. all terminal: WORKER_FAILED + PREEMPTED + tolerated FAILED -> WORKER_FAILED",
			with(jobOf(wfail, preempt, fail), func(v *domain.JobView) { v.MaxTaskFailures = 1 }), domain.PhaseWorkerFailed},
		{"5. not all terminal: WORKER_FAILED with a task still RUNNING -> RUNNING", jobOf(wfail, run), domain.PhaseRunning},
		{"5. not all terminal: PREEMPTED with a task PENDING, started before -> RUNNING",
			with(jobOf(preempt, pend), func(v *domain.JobView) { v.Started = true }), domain.PhaseRunning},

		// Rule 6 (Capstan's addition).
		{"6. all finished, the rest SUCCEEDED or tolerated FAILED -> SUCCEEDED",
			with(jobOf(succ, succ, fail), func(v *domain.JobView) { v.MaxTaskFailures = 1 }), domain.PhaseSucceeded},
		{"6. all tolerated FAILED -> SUCCEEDED",
			with(jobOf(fail, fail), func(v *domain.JobView) { v.MaxTaskFailures = 2 }), domain.PhaseSucceeded},

		// Rule 7.
		{"7. RUNNING: Any task is ASSIGNED", jobOf(assign, pend), domain.PhaseRunning},
		{"7. RUNNING: Any task is BUILDING", jobOf(build, pend, pend), domain.PhaseRunning},
		{"7. RUNNING: Any task is RUNNING", jobOf(run), domain.PhaseRunning},
		{"9. RUNNING: started before, all tasks back in PENDING after a retry",
			with(jobOf(pend, pend), func(v *domain.JobView) { v.Started = true }), domain.PhaseRunning},
		{"7. RUNNING wins over a known pending_reason",
			with(jobOf(run, pend), func(v *domain.JobView) { v.PendingReason = true }), domain.PhaseRunning},

		// Rule 8 (Capstan's: KubeVela's waiting step).
		{"8. WAITING: a task waits for its target and none runs",
			with(jobOf(pend), func(v *domain.JobView) { v.Started, v.Waiting = true, true }), domain.PhaseWaiting},
		{"8. WAITING: a task waits while its sibling succeeded",
			with(jobOf(pend, succ), func(v *domain.JobView) { v.Started, v.Waiting = true, true }), domain.PhaseWaiting},
		{"7 before 8. a running sibling makes the job RUNNING, not WAITING",
			with(jobOf(pend, run), func(v *domain.JobView) { v.Started, v.Waiting = true, true }), domain.PhaseRunning},
		{"2 before 8. a failure beyond tolerance wins over a wait",
			with(jobOf(pend, fail), func(v *domain.JobView) { v.Started, v.Waiting = true, true }), domain.PhaseFailed},

		// Rules 9 and 10.
		{"10. PENDING: Default (no tasks have started) -> QUEUED", jobOf(pend, pend), domain.PhaseQueued},
		{"10. WAITING_FOR_RESOURCES when a pending_reason is known",
			with(jobOf(pend), func(v *domain.JobView) { v.PendingReason = true }), domain.PhaseWaitingForResources},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, domain.DeriveJobPhase(tc.v))
		})
	}
}

// Large jobs: counts, not just presence, drive rules 1, 2 and 5.
func TestDeriveJobPhaseCounts(t *testing.T) {
	t.Parallel()
	v := jobOf(append(repeat(succ, 999), run)...)
	require.Equal(t, domain.PhaseRunning, domain.DeriveJobPhase(v), "999 of 1000 SUCCEEDED is not all SUCCEEDED")

	v = jobOf(append(repeat(fail, 5), repeat(succ, 995)...)...)
	v.MaxTaskFailures = 5
	require.Equal(t, domain.PhaseSucceeded, domain.DeriveJobPhase(v), "5 FAILED tolerated by max_task_failures=5")
	v.MaxTaskFailures = 4
	require.Equal(t, domain.PhaseFailed, domain.DeriveJobPhase(v), "5 FAILED exceeds max_task_failures=4")
}

// deriveOracle restates Iris's job-state derivation, with Capstan's phase
// mapping and its added all-finished rule, over a
// list of task states, independently of JobView.
func deriveOracle(states []domain.TaskState, maxTaskFailures int, timeout, pendingReason, started bool) domain.Phase {
	n := func(pred func(domain.TaskState) bool) int {
		c := 0
		for _, s := range states {
			if pred(s) {
				c++
			}
		}
		return c
	}
	is := func(set ...domain.TaskState) func(domain.TaskState) bool {
		return func(s domain.TaskState) bool {
			for _, x := range set {
				if s == x {
					return true
				}
			}
			return false
		}
	}
	total := len(states)
	switch {
	case total > 0 && n(is(succ)) == total:
		return domain.PhaseSucceeded
	case n(is(fail)) > maxTaskFailures:
		return domain.PhaseFailed
	case n(is(unsched)) > 0:
		return domain.PhaseUnschedulable
	case n(is(kill)) > 0 && timeout:
		return domain.PhaseTimedOut
	case n(is(kill)) > 0:
		return domain.PhaseAborted
	case total > 0 && n(is(succ, fail, wfail, preempt)) == total && n(is(wfail, preempt)) > 0:
		return domain.PhaseWorkerFailed
	case total > 0 && n(is(succ, fail)) == total:
		return domain.PhaseSucceeded
	case n(is(assign, build, run)) > 0 || started:
		return domain.PhaseRunning
	case pendingReason:
		return domain.PhaseWaitingForResources
	}
	return domain.PhaseQueued
}

// FuzzDeriveJobPhase: derivation depends only on how many tasks are in each
// state, never on their order; it agrees with Iris's ordered rules;
// adding a KILLED or UNSCHEDULABLE task moves the job as rules 3-4 say.
func FuzzDeriveJobPhase(f *testing.F) {
	f.Add([]byte{byte(succ), byte(fail)}, uint8(0), uint8(0), uint64(1))
	f.Add([]byte{byte(succ), byte(fail)}, uint8(1), uint8(0), uint64(2))
	f.Add([]byte{byte(succ), byte(succ), byte(succ)}, uint8(0), uint8(0), uint64(3))
	f.Add([]byte{byte(wfail), byte(succ), byte(preempt)}, uint8(0), uint8(0), uint64(4))
	f.Add([]byte{byte(kill), byte(run)}, uint8(0), uint8(1), uint64(5))
	f.Add([]byte{byte(unsched), byte(kill), byte(fail)}, uint8(3), uint8(0), uint64(6))
	f.Add([]byte{byte(pend), byte(pend)}, uint8(0), uint8(2), uint64(7))
	f.Add([]byte{byte(pend), byte(assign), byte(build)}, uint8(0), uint8(4), uint64(8))
	f.Add([]byte{}, uint8(0), uint8(7), uint64(9))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, uint8(2), uint8(3), uint64(10))

	f.Fuzz(func(t *testing.T, raw []byte, maxTF, flags uint8, seed uint64) {
		if len(raw) > 256 {
			raw = raw[:256]
		}
		states := make([]domain.TaskState, len(raw))
		for i, b := range raw {
			states[i] = domain.TaskState(b % 11)
		}
		timeout, pendingReason, started := flags&1 != 0, flags&2 != 0, flags&4 != 0
		view := func(ss []domain.TaskState) domain.JobView {
			v := jobOf(ss...)
			v.MaxTaskFailures = int(maxTF % 8)
			v.KilledByTimeout, v.PendingReason, v.Started = timeout, pendingReason, started
			return v
		}
		got := domain.DeriveJobPhase(view(states))

		// Order independence.
		shuffled := append([]domain.TaskState(nil), states...)
		rand.New(rand.NewPCG(seed, ^seed)).Shuffle(len(shuffled), func(i, j int) {
			shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
		})
		require.Equal(t, got, domain.DeriveJobPhase(view(shuffled)), "derivation depends on task order: %v vs %v", states, shuffled)

		// Agreement with Iris's ordered rules.
		require.Equal(t, deriveOracle(states, int(maxTF%8), timeout, pendingReason, started), got, "states %v maxTF %d flags %b", states, maxTF%8, flags)

		// The result is a job-level phase, never a workflow-level one.
		require.NotContains(t, []domain.Phase{domain.PhasePaused, domain.PhaseSkipped, ""}, got)

		failedBeyond := view(states).Count(fail) > int(maxTF%8)
		// Rule 4: one more KILLED task (not FAILED beyond tolerance, no
		// UNSCHEDULABLE) -> ABORTED or TIMED_OUT.
		withKill := view(append(append([]domain.TaskState(nil), states...), kill))
		if !failedBeyond && withKill.Count(unsched) == 0 {
			want := domain.PhaseAborted
			if timeout {
				want = domain.PhaseTimedOut
			}
			require.Equal(t, want, domain.DeriveJobPhase(withKill), "any KILLED -> ABORTED")
		}
		// Rule 3: one more UNSCHEDULABLE (not FAILED beyond tolerance).
		withUnsched := view(append(append([]domain.TaskState(nil), states...), unsched))
		if !failedBeyond {
			require.Equal(t, domain.PhaseUnschedulable, domain.DeriveJobPhase(withUnsched), "any UNSCHEDULABLE -> UNSCHEDULABLE")
		}
		// Rule 2: FAILED beyond tolerance always wins.
		if failedBeyond {
			require.Equal(t, domain.PhaseFailed, got)
		}
		// A live task is never hidden behind QUEUED / WAITING / SUCCEEDED.
		if view(states).Count(run)+view(states).Count(assign)+view(states).Count(build) > 0 {
			require.NotContains(t, []domain.Phase{domain.PhaseQueued, domain.PhaseWaitingForResources, domain.PhaseSucceeded, domain.PhaseWorkerFailed}, got)
		}
	})
}
