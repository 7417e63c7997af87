package scheduler

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A placement pass places each PENDING task on a worker whose labels satisfy
// its constraints and whose free slots fit (Iris's placement), binds it with
// an ASSIGNED attempt, dispatches the attempts to the worker's queue in one
// message, and gives every task left waiting a pending_reason.
func TestPlacementHonoursConstraintsAndSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	wa := f.registerWith(t, 1, map[string]string{"zone": "a"})
	wb := f.registerWith(t, 2, map[string]string{"zone": "b"})
	key := f.newRun(t, "placed", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: iptr(3),
		Constraints: []domain.Constraint{{Key: "zone", Op: domain.OpEQ, Value: "b"}}}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)

	res, err := f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Placed, "zone b has two slots")
	require.Equal(t, 1, res.Waiting)
	var waiting int
	for _, td := range f.tasks(t, key, "s") {
		switch td.Task.State {
		case domain.TaskAssigned:
			require.Equal(t, wb.ID, *td.Task.WorkerID)
			require.Len(t, td.Attempts, 1)
			require.Equal(t, domain.TaskAssigned, td.Attempts[0].State)
		case domain.TaskPending:
			waiting++
			require.NotNil(t, td.Task.PendingReason, "a waiting task says why")
		default:
			t.Fatalf("task %d is %s", td.Task.Idx, td.Task.State)
		}
	}
	require.Equal(t, 1, waiting)
	pending, err := f.insp.ListPendingTasks(queue.WorkerQueue(wb.ID))
	require.NoError(t, err)
	require.Len(t, pending, 1, "one message for both attempts of zone b's worker")
	require.Equal(t, queue.TypeAttemptsRun, pending[0].Type)
	var p queue.AttemptsPayload
	require.NoError(t, json.Unmarshal(pending[0].Payload, &p))
	var assigned []int64
	for _, td := range f.tasks(t, key, "s") {
		if td.Task.State == domain.TaskAssigned {
			assigned = append(assigned, td.Attempts[0].ID)
		}
	}
	require.ElementsMatch(t, assigned, p.AttemptIDs)
	// The message carries what the executor needs to run each attempt, as
	// the api's read of it would answer.
	require.Len(t, p.Specs, 2)
	for _, spec := range verifiedSpecs(t, wb.ID, p.Specs) {
		run, err := f.st.Attempts().GetAttemptRun(ctx, spec.Id)
		require.NoError(t, err)
		require.Equal(t, key.Action("s"), domain.RunKey{Project: spec.Project, Domain: spec.Domain, Run: spec.Run}.Action(spec.Action))
		require.Equal(t, run.Task.Idx, spec.TaskIndex)
		require.Equal(t, wb.ID, *spec.WorkerId)
		require.Equal(t, "true", spec.Command)
		require.Equal(t, 3, spec.Replicas)
		require.Equal(t, run.Attempt.Number, spec.Number)
		require.True(t, spec.Proceed)
	}
	require.False(t, f.hasQueue(t, wa.ID), "nothing dispatched to zone a")
	act, err := f.st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseRunning), act.Action.Phase)
}

// A step with secret_env is dispatched by attempt id alone: its secrets
// stay out of Redis, and the executor reads them from the api. So is a step
// with inputs, which the api resolves from their producers' outputs at the
// read.
func TestPlacementDispatchesNoSpecWithSecretsOrInputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.registerWith(t, 4, nil)
	key := f.newRun(t, "secret", domain.WorkflowSpec{Steps: []domain.Step{
		{Name: "s", Command: "true", SecretEnv: map[string]string{"TOKEN": "hunter2"}}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	res, err := f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Placed)
	pending, err := f.insp.ListPendingTasks(queue.WorkerQueue(w.ID))
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.NotContains(t, string(pending[0].Payload), "hunter2")
	var p queue.AttemptPayload
	require.NoError(t, json.Unmarshal(pending[0].Payload, &p))
	require.NotZero(t, p.AttemptID)
	require.Nil(t, p.Spec)

	worker := w.ID
	plain := store.Assigned{Attempt: store.Attempt{ID: 1, Number: 1, WorkerID: &worker}, Step: domain.Step{Name: "s", Command: "true"}}
	_, ok := dispatchSpec(plain)
	require.True(t, ok)
	withInputs := plain
	withInputs.Step.Inputs = []domain.Input{{From: "a.Y", As: "X"}}
	_, ok = dispatchSpec(withInputs)
	require.False(t, ok)
}

// A coscheduled step is placed all together or not at all (Iris's gang
// scheduling): with two free slots its three tasks wait, each with a reason;
// with a third slot they are all placed in one pass.
func TestPlacementPlacesAGangTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	f.registerWith(t, 2, nil)
	key := f.newRun(t, "gang", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: iptr(3),
		Coscheduled: true}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)

	res, err := f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Placed)
	require.Equal(t, 3, res.Waiting)
	for _, td := range f.tasks(t, key, "s") {
		require.Equal(t, domain.TaskPending, td.Task.State)
		require.NotNil(t, td.Task.PendingReason)
	}
	act, err := f.st.Actions().GetAction(ctx, key.Action("s"))
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseWaitingForResources), act.Action.Phase)

	f.registerWith(t, 1, nil)
	res, err = f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, res.Placed)
	for _, td := range f.tasks(t, key, "s") {
		require.Equal(t, domain.TaskAssigned, td.Task.State)
		require.Nil(t, td.Task.PendingReason)
	}
}

// A gang that the pass's read of PENDING tasks ends in (the read was full
// in its group) is read whole (store.PendingWork completes it) and placed
// whole: never in part.
func TestPlacementReadsWholeTheGangTheReadEndsIn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	f.s.cfg.Placement.BatchSize = 4
	f.registerWith(t, 10, nil)
	single := f.newRun(t, "single", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true",
		Replicas: iptr(2)}}})
	_, err := f.s.advance(ctx, single)
	require.NoError(t, err)
	gang := f.newRun(t, "gang", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: iptr(3),
		Coscheduled: true}}})
	_, err = f.s.advance(ctx, gang)
	require.NoError(t, err)

	res, err := f.s.placeOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, res.Placed, "a read of 4 holds the gang's third task too")
	for _, k := range []domain.RunKey{single, gang} {
		for _, td := range f.tasks(t, k, "s") {
			require.Equal(t, domain.TaskAssigned, td.Task.State)
		}
	}
}

// registerWith registers an alive worker with slots and labels.
func (f *runFixture) registerWith(t *testing.T, slots int, labels map[string]string) store.Worker {
	t.Helper()
	w, err := f.st.Workers().RegisterWorker(context.Background(), store.NewWorker{Name: "w", Address: "http://127.0.0.1:1",
		Slots: slots, Labels: labels})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.insp.DeleteQueue(queue.WorkerQueue(w.ID), true) })
	return w
}

// A container task is placed only on a worker that advertises the plugin;
// without one it waits WAITING_FOR_RESOURCES with the reason "no worker
// runs plugin container", and ends UNSCHEDULABLE at its scheduling
// deadline.
func TestPlacementByPlugin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	f.registerWith(t, 4, nil)
	container := domain.Step{Name: "c", Plugin: domain.PluginContainer, Container: &domain.ContainerSpec{Image: "alpine:3"}}
	key := f.newRun(t, "c", domain.WorkflowSpec{Steps: []domain.Step{container}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	res, err := f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Placed)
	d, err := f.st.Actions().GetAction(ctx, key.Action("c"))
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseWaitingForResources), d.Action.Phase)
	require.Equal(t, "no worker runs plugin container", *d.Tasks[0].Task.PendingReason)

	docker := f.registerWith(t, 1, map[string]string{domain.PluginLabel(domain.PluginContainer): "true"})
	res, err = f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Placed)
	require.Equal(t, docker.ID, *f.tasks(t, key, "c")[0].Task.WorkerID)

	container.Name, container.SchedulingTimeout = "late", "1ms"
	late := f.newRun(t, "late", domain.WorkflowSpec{Steps: []domain.Step{container, {Name: "after", Command: "x"}}})
	_, err = f.s.advance(ctx, late)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := f.s.runOnce(ctx)
		require.NoError(t, err)
		return f.tasks(t, late, "late")[0].Task.State == domain.TaskUnschedulable
	}, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, string(domain.PhaseUnschedulable), f.action(t, late, "late").Phase)
}

// A pass takes the placement lock, reads the PENDING tasks and the workers
// in one statement, and binds the tasks it placed in two more, the bind
// and its events, all in one transaction: one that finds no task makes
// the lock and the read alone.
func TestPassReadsTasksAndWorkersInOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	_, err := f.st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 1})
	require.NoError(t, err)
	before := statementCounts(t, f.statements)
	res, err := f.s.placeOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Placed)
	counts := statementCounts(t, f.statements)
	require.EqualValues(t, 1, counts["PendingWork"])
	require.EqualValues(t, 1, counts["Lock"])
	require.EqualValues(t, 2, counts[""]-before[""], "the lock and the read alone")
	key := f.newRun(t, "r", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}})
	_, err = f.s.advance(ctx, key)
	require.NoError(t, err)
	before = statementCounts(t, f.statements)
	res, err = f.s.placeOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Placed)
	counts = statementCounts(t, f.statements)
	require.EqualValues(t, 1, counts["PendingWork"]-before["PendingWork"])
	require.EqualValues(t, 1, counts["AssignTasks"]-before["AssignTasks"], "the bind")
	require.EqualValues(t, 1, counts["flushEvents"]-before["flushEvents"], "its events")
	require.EqualValues(t, 4, counts[""]-before[""], "the lock, the read, the bind and its events")
}

// An evaluation that ends its run kicks no pass when the leader's last pass
// left nothing to place, and kicks one when a task waits for the slot it
// freed; one that puts a task back PENDING always kicks.
func TestEvaluationKicksAPassWhenOneHasWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	f.registerWith(t, 1, nil)
	noop := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}}
	drain := func() bool {
		select {
		case <-f.s.kick:
			return true
		default:
			return false
		}
	}
	assigned := func(key domain.RunKey) store.Attempt {
		t.Helper()
		td := f.tasks(t, key, "s")
		require.Len(t, td, 1)
		require.NotEmpty(t, td[0].Attempts, "%s placed", key)
		return td[0].Attempts[len(td[0].Attempts)-1]
	}
	end := func(a store.Attempt, rep store.Report) {
		t.Helper()
		for _, r := range []store.Report{reportRunning, rep} {
			_, err := storetest.ReportAttempt(ctx, f.st, a.ID, r)
			require.NoError(t, err)
		}
		ev, err := f.s.evaluate(ctx, a.ID)
		require.NoError(t, err)
		require.True(t, ev.Done)
	}

	one := f.startRun(t, "one", noop)
	require.True(t, drain(), "a started step kicks")
	f.s.pass(ctx, false)
	end(assigned(one), reportSucceeded)
	require.False(t, drain(), "nothing left to place: no kick")

	two, three := f.startRun(t, "two", noop), f.startRun(t, "three", noop)
	drain()
	f.s.pass(ctx, false) // one slot: three waits
	end(assigned(two), reportSucceeded)
	require.True(t, drain(), "three waits for the freed slot")

	f.s.pass(ctx, false)
	end(assigned(three), reportWorkerLost) // retried: PENDING again
	require.True(t, drain(), "a task PENDING again kicks")
}
