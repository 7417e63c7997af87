package scheduler

import (
	"context"
	"fmt"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

func TestPreemptAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "victims", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Replicas: iptr(2), Priority: "batch"}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	tasks := f.tasks(t, key, "s")
	assigned, _, err := storetest.AssignTask(ctx, f.st, tasks[0].Task.ID, w.ID)
	require.NoError(t, err)
	running, _, err := storetest.AssignTask(ctx, f.st, tasks[1].Task.ID, w.ID)
	require.NoError(t, err)
	_, err = storetest.ReportAttempt(ctx, f.st, running.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)

	ev, kill, err := f.s.preemptAttempt(ctx, assigned.ID)
	require.NoError(t, err)
	require.False(t, kill, "an ASSIGNED attempt has no process to kill")
	require.Equal(t, domain.ShouldRetry, ev.Result, "preempting an ASSIGNED task is free")
	td := f.tasks(t, key, "s")[0]
	require.Equal(t, domain.TaskPending, td.Task.State)
	require.Equal(t, 0, td.Task.PreemptionCount)
	require.Equal(t, domain.TaskPreempted, td.Attempts[0].State)

	_, kill, err = f.s.preemptAttempt(ctx, running.ID)
	require.NoError(t, err)
	require.True(t, kill, "a started attempt is killed through the abort path")
	kills, err := f.st.Aborts().ListPendingKills(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{running.ID}, kills)
	td = f.tasks(t, key, "s")[1]
	require.Equal(t, domain.TaskRunning, td.Task.State, "its resources stay held until the process stops")

	res, err := storetest.ReportAttempt(ctx, f.st, running.ID, store.Report{State: domain.TaskPreempted, Cause: "preempted"})
	require.NoError(t, err)
	require.True(t, res.Evaluate)
	ev, err = f.s.evaluate(ctx, running.ID)
	require.NoError(t, err)
	require.Equal(t, domain.ShouldRetry, ev.Result)
	td = f.tasks(t, key, "s")[1]
	require.Equal(t, 1, td.Task.PreemptionCount, "a started victim charges the preemption budget")
	require.Equal(t, 0, td.Task.FailureCount)
	require.Equal(t, domain.TaskPending, td.Task.State)
}

// TestPreemptionIsFreeOnlyWhileAssigned checks Iris's preemption budget
// (its task-states reference, PREEMPTED): "ASSIGNED tasks: always retry to PENDING regardless
// of budget (the task never started executing, so preemption is free).
// BUILDING or RUNNING tasks: preemption_count is incremented and compared
// against max_retries_preemption." A BUILDING victim has no started_at yet,
// and is charged all the same.
func TestPreemptionIsFreeOnlyWhileAssigned(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		reports []store.Report
		// kill: the victim has a process, stopped through the abort path.
		kill    bool
		charged int
	}{
		{"ASSIGNED: free", nil, false, 0},
		{"BUILDING: charged", []store.Report{reportBuilding}, true, 1},
		{"RUNNING: charged", []store.Report{reportRunning}, true, 1},
	}
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := f.startedTasks(t, fmt.Sprintf("victim-%d", i), 1)[0]
			a := f.attemptIn(t, w, id, tt.reports...)
			state := f.task(t, a.ID).State

			ev, kill, err := f.s.preemptAttempt(ctx, a.ID)
			require.NoError(t, err)
			require.Equal(t, tt.kill, kill)
			if kill {
				require.False(t, ev.Done, "nothing is decided while the process runs")
				require.Equal(t, state, f.task(t, a.ID).State, "its resources stay held until the process stops")
				res, err := storetest.ReportAttempt(ctx, f.st, a.ID, reportPreempted) // the executor, once it killed it
				require.NoError(t, err)
				require.True(t, res.Evaluate)
				ev, err = f.s.evaluate(ctx, a.ID)
				require.NoError(t, err)
			}
			require.True(t, ev.Done)
			require.Equal(t, domain.ShouldRetry, ev.Result)
			task := f.task(t, a.ID)
			require.Equal(t, domain.TaskPending, task.State)
			require.Equal(t, tt.charged, task.PreemptionCount)
			require.Zero(t, task.FailureCount)
			require.Equal(t, domain.TaskPreempted, f.attempt(t, a.ID).State)
		})
	}
}

// A pass reads the running attempts (LiveOnWorkers) to preempt for a task
// left waiting only when a worker runs one of a lower band: not while the
// only slot runs a task of the waiting one's band; when it runs a batch
// task, the pass reads them and preempts that one.
func TestPassReadsRunningAttemptsOnlyWhenALowerBandRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		band    string
		reads   int64
		preempt bool
	}{{"interactive", 0, false}, {"batch", 1, true}} {
		f := newRunFixture(t, domain.ARCTable)
		w := f.registerWith(t, 1, nil)
		start := func(name, band string) int64 {
			key := f.newRun(t, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Priority: band}}})
			_, err := f.s.advance(ctx, key)
			require.NoError(t, err)
			return f.tasks(t, key, "s")[0].Task.ID
		}
		running := f.attemptIn(t, w, start("running", tt.band), reportRunning)
		start("waiting", "interactive")
		before := statementCounts(t, f.statements)["LiveOnWorkers"]
		res, err := f.s.placeOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, tt.reads, statementCounts(t, f.statements)["LiveOnWorkers"]-before, tt.band)
		require.Equal(t, 1, res.Waiting, tt.band)
		require.Equal(t, tt.preempt, f.attempt(t, running.ID).KillRequestedAt != nil, tt.band)
	}
}
