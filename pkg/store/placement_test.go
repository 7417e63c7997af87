package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

func TestPendingOrderAndReasons(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	low := newRun(t, st, "low", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Priority: "batch"}}})
	high := newRun(t, st, "high", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Priority: "production",
		Resources:   &domain.Resources{CPUMillis: 500, MemoryBytes: 1 << 30},
		Constraints: []domain.Constraint{{Key: "gpu", Op: domain.OpExists}}}}})
	for _, k := range []domain.RunKey{low, high} {
		_, err := st.AdvanceRun(ctx, k)
		require.NoError(t, err)
	}
	pending, err := st.PendingTasks(ctx, 10)
	require.NoError(t, err)
	require.Len(t, pending, 2)
	require.Equal(t, "high", pending[0].RunName, "the production band is placed first")
	require.Equal(t, int64(500), pending[0].CPUMillis, "resources copied from the step")
	require.JSONEq(t, `[{"key":"gpu","op":"EXISTS"}]`, string(pending[0].Constraints))

	reason := "no worker matches constraint gpu=EXISTS"
	require.NoError(t, st.SetPendingReasons(ctx, map[int64]string{pending[0].ID: reason}))
	d, err := st.GetAction(ctx, high.Action("s"))
	require.NoError(t, err)
	require.Equal(t, reason, *d.Tasks[0].Task.PendingReason)
	require.Equal(t, string(domain.PhaseWaitingForResources), d.Action.Phase, "a known pending_reason shows as WAITING_FOR_RESOURCES")

	w := registerWorker(t, st)
	_, ok, err := st.AssignTask(ctx, pending[0].ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	d, err = st.GetAction(ctx, high.Action("s"))
	require.NoError(t, err)
	require.Nil(t, d.Tasks[0].Task.PendingReason, "placing a task clears its reason")
	require.Equal(t, string(domain.PhaseRunning), d.Action.Phase)
}

func TestSchedulingDeadlineMakesTheJobUnschedulable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	key := newRun(t, st, "deadline", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: intp(2),
		SchedulingTimeout: "1ms"}}})
	_, err := st.AdvanceRun(ctx, key)
	require.NoError(t, err)
	tasks := tasksOf(t, st, key, "s")
	_, ok, err := st.AssignTask(ctx, tasks[1].Task.ID, w.ID) // one task got a worker, one waits
	require.NoError(t, err)
	require.True(t, ok)
	require.Eventually(t, func() bool {
		ended, err := st.ExpireSchedulingDeadlines(ctx)
		require.NoError(t, err)
		return len(ended) == 1
	}, 5*time.Second, 5*time.Millisecond)

	d, err := st.GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseUnschedulable), d.Action.Phase, "any UNSCHEDULABLE task -> job UNSCHEDULABLE")
	require.Equal(t, int16(domain.TaskUnschedulable), d.Tasks[0].Task.State)
	require.Equal(t, int16(domain.TaskKilled), d.Tasks[1].Task.State, "the job's other tasks are killed")
	require.NotNil(t, d.Action.AbortRequestedAt, "the killed task's live attempt must be stopped")
	adv, err := st.AdvanceRun(ctx, key)
	require.NoError(t, err)
	require.Equal(t, domain.PhaseUnschedulable, adv.Phase)
}

func TestGangCascadeAndMaxTaskFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	key := newRun(t, st, "gang", domain.WorkflowSpec{Steps: []domain.Step{{Name: "g", Command: "true", Replicas: intp(3), Coscheduled: true}}})
	_, err := st.AdvanceRun(ctx, key)
	require.NoError(t, err)
	tasks := tasksOf(t, st, key, "g")
	var sibling store.Attempt
	for i, td := range tasks[1:] {
		a, ok, err := st.AssignTask(ctx, td.Task.ID, w.ID)
		require.NoError(t, err)
		require.True(t, ok)
		if i == 0 {
			_, err = st.ReportAttempt(ctx, a.ID, store.Report{State: domain.TaskRunning})
			require.NoError(t, err)
			sibling = a
		}
	}
	ev := runAttempt(t, st, w, tasks[0].Task.ID, domain.TaskFailed, 2)
	require.Equal(t, domain.ExceededRetryLimit, ev.Result)
	require.Equal(t, domain.PhaseFailed, ev.ActionPhase)
	require.NotNil(t, ev.AbortSurvivors, "the siblings' live attempts must be killed")

	got := tasksOf(t, st, key, "g")
	for _, td := range got[1:] {
		require.Equal(t, int16(domain.TaskWorkerFailed), td.Task.State, "running siblings are exhausted to WORKER_FAILED")
		require.Greater(t, td.Task.PreemptionCount, td.Task.MaxRetriesPreemption)
	}
	live, err := st.LiveAttemptsUnder(ctx, key.Action("g"))
	require.NoError(t, err)
	require.Len(t, live, 2)
	require.Equal(t, sibling.ID, live[0].ID)
}

func TestMaxTaskFailuresToleratesFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	key := newRun(t, st, "tolerant", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: intp(3),
		MaxTaskFailures: intp(1)}}})
	_, err := st.AdvanceRun(ctx, key)
	require.NoError(t, err)
	tasks := tasksOf(t, st, key, "s")
	ev := runAttempt(t, st, w, tasks[0].Task.ID, domain.TaskFailed, 1)
	require.Equal(t, domain.PhaseRunning, ev.ActionPhase, "1 FAILED <= max_task_failures 1: the job goes on")
	runAttempt(t, st, w, tasks[1].Task.ID, domain.TaskSucceeded, 0)
	ev = runAttempt(t, st, w, tasks[2].Task.ID, domain.TaskSucceeded, 0)
	require.Equal(t, domain.PhaseSucceeded, ev.ActionPhase, "all finished, failures within tolerance")
}

func TestTimedOutTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	key := newRun(t, st, "slow", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Timeout: "1ms"}}})
	_, err := st.AdvanceRun(ctx, key)
	require.NoError(t, err)
	a, _, err := st.AssignTask(ctx, tasksOf(t, st, key, "s")[0].Task.ID, w.ID)
	require.NoError(t, err)
	tos, err := st.TimedOutTasks(ctx)
	require.NoError(t, err)
	require.Empty(t, tos, "an attempt that has not started cannot time out")
	_, err = st.ReportAttempt(ctx, a.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		tos, err = st.TimedOutTasks(ctx)
		require.NoError(t, err)
		return len(tos) == 1
	}, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, key.Action("s"), tos[0].Action)
	require.Equal(t, time.Millisecond, tos[0].Timeout)
}

func TestPreemptAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	key := newRun(t, st, "victims", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Replicas: intp(2), Priority: "batch"}}})
	_, err := st.AdvanceRun(ctx, key)
	require.NoError(t, err)
	tasks := tasksOf(t, st, key, "s")
	assigned, _, err := st.AssignTask(ctx, tasks[0].Task.ID, w.ID)
	require.NoError(t, err)
	running, _, err := st.AssignTask(ctx, tasks[1].Task.ID, w.ID)
	require.NoError(t, err)
	_, err = st.ReportAttempt(ctx, running.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)

	ev, kill, err := st.PreemptAttempt(ctx, assigned.ID, noDelay)
	require.NoError(t, err)
	require.False(t, kill, "an ASSIGNED attempt has no process to kill")
	require.Equal(t, domain.ShouldRetry, ev.Result, "preempting an ASSIGNED task is free")
	td := tasksOf(t, st, key, "s")[0]
	require.Equal(t, int16(domain.TaskPending), td.Task.State)
	require.Equal(t, 0, td.Task.PreemptionCount)
	require.Equal(t, int16(domain.TaskPreempted), td.Attempts[0].State)

	_, kill, err = st.PreemptAttempt(ctx, running.ID, noDelay)
	require.NoError(t, err)
	require.True(t, kill, "a started attempt is killed through the abort path")
	kills, err := st.ListPendingKills(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{running.ID}, kills)
	td = tasksOf(t, st, key, "s")[1]
	require.Equal(t, int16(domain.TaskRunning), td.Task.State, "its resources stay held until the process stops")

	res, err := st.ReportAttempt(ctx, running.ID, store.Report{State: domain.TaskPreempted, Cause: "preempted"})
	require.NoError(t, err)
	require.True(t, res.Evaluate)
	ev, err = st.EvaluateAttempt(ctx, running.ID, noDelay)
	require.NoError(t, err)
	require.Equal(t, domain.ShouldRetry, ev.Result)
	td = tasksOf(t, st, key, "s")[1]
	require.Equal(t, 1, td.Task.PreemptionCount, "a started victim charges the preemption budget")
	require.Equal(t, 0, td.Task.FailureCount)
	require.Equal(t, int16(domain.TaskPending), td.Task.State)
}
