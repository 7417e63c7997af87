package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// TestSchedulingDeadlineMakesTheJobUnschedulable: Iris's
// _mark_task_unschedulable. A task still PENDING past its scheduling deadline
// is UNSCHEDULABLE, and so its job; the job's other tasks are KILLED and the
// run advances.
func TestSchedulingDeadlineMakesTheJobUnschedulable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "deadline", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: iptr(2),
		SchedulingTimeout: "1ms"}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	tasks := f.tasks(t, key, "s")
	_, ok, err := storetest.AssignTask(ctx, f.st, tasks[1].Task.ID, w.ID) // one task got a worker, one waits
	require.NoError(t, err)
	require.True(t, ok)
	var res ExpiryResult
	require.Eventually(t, func() bool {
		res, err = (expiry{f.s}).runOnce(ctx)
		return err != nil || res.Unschedulable == 1
	}, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, ExpiryResult{Unschedulable: 1}, res)

	d, err := f.st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseUnschedulable), d.Action.Phase, "any UNSCHEDULABLE task -> job UNSCHEDULABLE")
	require.Equal(t, domain.TaskUnschedulable, d.Tasks[0].Task.State)
	require.Equal(t, domain.TaskKilled, d.Tasks[1].Task.State, "the job's other tasks are killed")
	require.NotNil(t, d.Action.AbortRequestedAt, "the killed task's live attempt must be stopped")
	adv, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	require.Equal(t, domain.PhaseUnschedulable, adv.Phase)

	again, err := (expiry{f.s}).runOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, again.Unschedulable, "an ended job is not ended twice")
}

// A pass a kick starts within Placement.ExpiryEvery of the last expiry pass
// places without one: a task past its scheduling deadline is neither placed
// nor ended then; the next pass the timer starts ends its job.
func TestKickedPassLeavesExpiryToTheTimer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	f.s.cfg.Placement.ExpiryEvery = time.Hour
	f.register(t)
	late := f.newRun(t, "late", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", SchedulingTimeout: "1h"}}})
	plain := f.newRun(t, "plain", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}})
	for _, key := range []domain.RunKey{late, plain} {
		_, err := f.s.advance(ctx, key)
		require.NoError(t, err)
	}
	_, err := f.db.ExecContext(ctx, `UPDATE tasks SET scheduling_deadline = now() - interval '1 second' WHERE run_name = 'late'`)
	require.NoError(t, err)

	f.s.expiredAt = time.Now()
	f.s.pass(ctx, false)
	require.Equal(t, domain.TaskAssigned, f.tasks(t, plain, "s")[0].Task.State, "a kicked pass places")
	require.Equal(t, domain.TaskPending, f.tasks(t, late, "s")[0].Task.State, "past its deadline: not placed, not yet ended")

	f.s.pass(ctx, true)
	require.Equal(t, domain.TaskUnschedulable, f.tasks(t, late, "s")[0].Task.State, "the timer's pass ends it")
}
