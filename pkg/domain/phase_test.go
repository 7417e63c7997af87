package domain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

var allPhases = []domain.Phase{
	domain.PhaseQueued, domain.PhaseWaitingForResources, domain.PhaseRunning,
	domain.PhaseSucceeded, domain.PhaseFailed, domain.PhaseAborted, domain.PhaseTimedOut,
	domain.PhaseUnschedulable, domain.PhaseWorkerFailed, domain.PhasePaused, domain.PhaseSkipped,
}

func TestPhaseValues(t *testing.T) {
	t.Parallel()
	// Values match the API enum (openapi/capstan.yaml).
	want := []string{"QUEUED", "WAITING_FOR_RESOURCES", "RUNNING", "SUCCEEDED", "FAILED", "ABORTED",
		"TIMED_OUT", "UNSCHEDULABLE", "WORKER_FAILED", "PAUSED", "SKIPPED"}
	got := make([]string, len(allPhases))
	for i, p := range allPhases {
		got[i] = string(p)
	}
	require.Equal(t, want, got)
}

func TestPhaseIsTerminalIsSuccess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p                 domain.Phase
		terminal, success bool
		rule              string
	}{
		{domain.PhaseQueued, false, false, "QUEUED: no task has started"},
		{domain.PhaseWaitingForResources, false, false, "WAITING_FOR_RESOURCES: a pending_reason is known"},
		{domain.PhaseRunning, false, false, "RUNNING: any ASSIGNED/BUILDING/RUNNING"},
		{domain.PhasePaused, false, false, "PAUSED: suspend, approval, retries exhausted under on_failure: suspend (resumable)"},
		{domain.PhaseWaiting, false, false, "WAITING: marked as wait but not failed, it will wait for healthy (KubeVela)"},
		{domain.PhaseSucceeded, true, true, "SUCCEEDED: all tasks SUCCEEDED"},
		{domain.PhaseSkipped, true, true, "SKIPPED: an `if` that is false; lets dependents run"},
		{domain.PhaseFailed, true, false, "FAILED: FAILED count > max_task_failures"},
		{domain.PhaseAborted, true, false, "ABORTED: any KILLED"},
		{domain.PhaseTimedOut, true, false, "TIMED_OUT: the kill was a timeout"},
		{domain.PhaseUnschedulable, true, false, "UNSCHEDULABLE: any UNSCHEDULABLE"},
		{domain.PhaseWorkerFailed, true, false, "WORKER_FAILED: all terminal with any WORKER_FAILED/PREEMPTED"},
		{"", false, false, "empty phase is not a phase"},
		{"DONE", false, false, "unknown phase"},
		{"succeeded", false, false, "phases are case-sensitive"},
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.terminal, tc.p.IsTerminal(), "IsTerminal")
			require.Equal(t, tc.success, tc.p.IsSuccess(), "IsSuccess")
		})
	}
}

// Capstan's design: an action's phase only moves forward, except PAUSED ->
// RUNNING on resume (Flyte's UpdateActionPhase guard).
func TestCanMovePhase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from, to domain.Phase
		want     bool
		rule     string
	}{
		{domain.PhaseQueued, domain.PhaseRunning, true, "forward: QUEUED -> RUNNING"},
		{domain.PhaseQueued, domain.PhaseWaitingForResources, true, "QUEUED -> WAITING_FOR_RESOURCES: a pending_reason became known"},
		{domain.PhaseWaitingForResources, domain.PhaseQueued, true, "WAITING_FOR_RESOURCES -> QUEUED: same rank (documented in CanMovePhase)"},
		{domain.PhaseWaitingForResources, domain.PhaseRunning, true, "forward: WAITING_FOR_RESOURCES -> RUNNING"},
		{domain.PhaseQueued, domain.PhaseSucceeded, true, "forward: QUEUED -> terminal directly"},
		{domain.PhaseQueued, domain.PhaseAborted, true, "forward: abort before start"},
		{domain.PhaseQueued, domain.PhaseUnschedulable, true, "forward: scheduling timeout before start"},
		{domain.PhaseQueued, domain.PhaseSkipped, true, "forward: an `if` that is false"},
		{domain.PhaseQueued, domain.PhasePaused, true, "forward: approval step waits"},
		{domain.PhaseRunning, domain.PhasePaused, true, "RUNNING -> PAUSED: suspend"},
		{domain.PhaseRunning, domain.PhaseWaiting, true, "RUNNING -> WAITING: the target is not ready"},
		{domain.PhaseWaiting, domain.PhaseRunning, true, "WAITING -> RUNNING: the next check runs"},
		{domain.PhaseQueued, domain.PhaseWaiting, true, "QUEUED -> WAITING: a first check answered before RUNNING was recorded"},
		{domain.PhaseWaiting, domain.PhaseFailed, true, "WAITING -> FAILED: WaitTimeout"},
		{domain.PhaseWaiting, domain.PhaseQueued, false, "WAITING -> QUEUED: backwards"},
		{domain.PhasePaused, domain.PhaseRunning, true, "except PAUSED -> RUNNING on resume"},
		{domain.PhaseRunning, domain.PhaseSucceeded, true, "forward: RUNNING -> SUCCEEDED"},
		{domain.PhaseRunning, domain.PhaseFailed, true, "forward: RUNNING -> FAILED"},
		{domain.PhaseRunning, domain.PhaseTimedOut, true, "forward: RUNNING -> TIMED_OUT"},
		{domain.PhaseRunning, domain.PhaseWorkerFailed, true, "forward: RUNNING -> WORKER_FAILED"},
		{domain.PhasePaused, domain.PhaseAborted, true, "forward: abort a paused action"},
		{domain.PhaseRunning, domain.PhaseQueued, false, "only moves forward: RUNNING -/-> QUEUED"},
		{domain.PhaseRunning, domain.PhaseWaitingForResources, false, "only moves forward: RUNNING -/-> WAITING_FOR_RESOURCES"},
		{domain.PhasePaused, domain.PhaseQueued, false, "only moves forward: PAUSED -/-> QUEUED"},
		{domain.PhaseRunning, domain.PhaseRunning, false, "no move to the same phase"},
		{domain.PhaseQueued, domain.PhaseQueued, false, "no move to the same phase"},
		{domain.PhaseSucceeded, domain.PhaseSucceeded, false, "no move to the same phase"},
		{domain.PhaseSucceeded, domain.PhaseFailed, false, "a terminal phase never changes: SUCCEEDED -/-> FAILED"},
		{domain.PhaseAborted, domain.PhaseSucceeded, false, "a terminal phase never changes: ABORTED -/-> SUCCEEDED (a late report after abort)"},
		{domain.PhaseAborted, domain.PhaseRunning, false, "a terminal phase never changes: ABORTED -/-> RUNNING"},
		{domain.PhaseFailed, domain.PhaseQueued, false, "a terminal phase never changes: FAILED -/-> QUEUED"},
		{domain.PhaseSkipped, domain.PhaseRunning, false, "a terminal phase never changes: SKIPPED -/-> RUNNING"},
		{domain.PhaseTimedOut, domain.PhaseAborted, false, "a terminal phase never changes: TIMED_OUT -/-> ABORTED"},
		{domain.PhaseQueued, "", false, "unknown target phase"},
		{domain.PhaseQueued, "DONE", false, "unknown target phase"},
		{"", domain.PhaseRunning, false, "unknown source phase"},
		{"DONE", domain.PhaseSucceeded, false, "unknown source phase"},
	}
	for _, tc := range tests {
		t.Run(tc.rule+"/"+string(tc.from)+"->"+string(tc.to), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, domain.CanMovePhase(tc.from, tc.to))
		})
	}
}

// Exhaustive over all pairs: terminal phases are absorbing, and no pair of
// phases can move both ways except the two same-rank pairs
// (QUEUED <-> WAITING_FOR_RESOURCES, RUNNING <-> PAUSED).
func TestCanMovePhaseAllPairs(t *testing.T) {
	t.Parallel()
	sameRank := map[[2]domain.Phase]bool{
		{domain.PhaseQueued, domain.PhaseWaitingForResources}: true,
		{domain.PhaseWaitingForResources, domain.PhaseQueued}: true,
		{domain.PhaseRunning, domain.PhasePaused}:             true,
		{domain.PhasePaused, domain.PhaseRunning}:             true,
	}
	for _, from := range allPhases {
		for _, to := range allPhases {
			got := domain.CanMovePhase(from, to)
			if from.IsTerminal() {
				require.False(t, got, "%s is terminal but may move to %s", from, to)
				continue
			}
			if from != to && to.IsTerminal() {
				require.True(t, got, "non-terminal %s must be able to end in %s", from, to)
			}
			if got && domain.CanMovePhase(to, from) {
				require.True(t, sameRank[[2]domain.Phase{from, to}], "%s <-> %s moves both ways", from, to)
			}
		}
	}
}
