package domain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// stateRow is one row of the state table in Iris's task-states reference.
// Retriable is "--" there for the non-terminal states; here it is false for
// them.
type stateRow struct {
	rule      string // the Iris row, quoted
	state     domain.TaskState
	name      string
	value     int32
	terminal  bool
	retriable bool
	live      bool // ASSIGNED, BUILDING, RUNNING hold or may hold a process
}

// irisStateTable is Iris's state table, row by row, in Iris's order.
var irisStateTable = []stateRow{
	{"UNSPECIFIED 0 -- -- Default zero value; never used in practice", domain.TaskUnspecified, "UNSPECIFIED", 0, false, false, false},
	{"PENDING 1 No -- Job submission, retry requeue", domain.TaskPending, "PENDING", 1, false, false, false},
	{"ASSIGNED 9 No -- Scheduler dispatch", domain.TaskAssigned, "ASSIGNED", 9, false, false, true},
	{"BUILDING 2 No -- Worker heartbeat report; bundle download and dependency sync", domain.TaskBuilding, "BUILDING", 2, false, false, true},
	{"RUNNING 3 No -- Worker heartbeat report; user command starts running", domain.TaskRunning, "RUNNING", 3, false, false, true},
	{"SUCCEEDED 4 Yes No task exited with code 0", domain.TaskSucceeded, "SUCCEEDED", 4, true, false, false},
	{"FAILED 5 Yes Yes task exited with non-zero code", domain.TaskFailed, "FAILED", 5, true, true, false},
	{"KILLED 6 Yes No Controller: job cancellation, job failure cascade, per-task timeout", domain.TaskKilled, "KILLED", 6, true, false, false},
	{"WORKER_FAILED 7 Yes Yes Controller: worker death cascade", domain.TaskWorkerFailed, "WORKER_FAILED", 7, true, true, false},
	{"UNSCHEDULABLE 8 Yes No Controller: scheduling timeout expired", domain.TaskUnschedulable, "UNSCHEDULABLE", 8, true, false, false},
	{"PREEMPTED 10 Yes Yes Controller: priority preemption", domain.TaskPreempted, "PREEMPTED", 10, true, true, false},
}

func TestStateTable(t *testing.T) {
	t.Parallel()
	require.Len(t, irisStateTable, 11, "the Iris State Table has 11 rows")
	for _, tc := range irisStateTable {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.value, int32(tc.state), "proto value")
			require.Equal(t, tc.name, tc.state.String(), "name")
			require.Equal(t, tc.terminal, tc.state.IsTerminal(), "terminal column")
			require.Equal(t, tc.live, tc.state.IsLive(), "IsLive")

			// String/Parse round trip, both ways.
			got, ok := domain.ParseTaskState(tc.name)
			require.True(t, ok, "ParseTaskState(%q)", tc.name)
			require.Equal(t, tc.state, got)
			byValue, ok := domain.ParseTaskState(domain.TaskState(tc.value).String())
			require.True(t, ok)
			require.Equal(t, tc.state, byValue)
		})
	}
}

// The Retriable column, checked through the retry rules: a retriable state
// with budget left is requeued (SHOULD_RETRY); a non-retriable terminal
// state is never retried.
func TestStateTableRetriableColumn(t *testing.T) {
	t.Parallel()
	roomy := domain.Budget{MaxRetriesFailure: 5, MaxRetriesPreemption: 5, MaxSystemFailures: 5}
	for _, tc := range irisStateTable {
		if !tc.terminal {
			continue // "--" in Iris's table
		}
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			_, res := domain.HandleAttemptResult(roomy, domain.AttemptOutcome{State: tc.state})
			if tc.retriable {
				require.Equal(t, domain.ShouldRetry, res, "Retriable=Yes with budget left -> SHOULD_RETRY")
			} else {
				require.Equal(t, domain.NoRetry, res, "Retriable=No -> never retried")
			}
		})
	}
}

func TestParseTaskStateUnknown(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "pending", "TASK_STATE_PENDING", "Running", "WORKER-FAILED", "DONE", "TaskState(11)"} {
		s, ok := domain.ParseTaskState(name)
		require.False(t, ok, "ParseTaskState(%q) must reject an unknown name", name)
		require.Equal(t, domain.TaskUnspecified, s)
	}
}

func TestTaskStateOutOfRange(t *testing.T) {
	t.Parallel()
	for _, s := range []domain.TaskState{-1, 11, 42} {
		require.False(t, s.IsTerminal(), "%d", s)
		require.False(t, s.IsLive(), "%d", s)
		_, ok := domain.ParseTaskState(s.String())
		require.False(t, ok, "String of an unknown value %d must not parse as a known state", s)
	}
	require.Equal(t, "TaskState(11)", domain.TaskState(11).String())
}

// Capstan's design: task states follow the Iris task-states reference
// exactly, values included; every name is distinct and every value 0..10 is
// used.
func TestTaskStateNamesDistinct(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for v := domain.TaskState(0); v <= 10; v++ {
		n := v.String()
		require.False(t, names[n], "duplicate name %q", n)
		names[n] = true
		require.NotContains(t, n, "TaskState(", "value %d has no Iris name", v)
	}
}
