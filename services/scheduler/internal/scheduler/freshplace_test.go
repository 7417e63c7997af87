package scheduler

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// On the leader, a fresh run's tasks are bound in the transaction that
// starts the run: ASSIGNED with their attempts once it commits, dispatched
// with their specs, no pass kicked, and the events in the order of what
// happened (the start, the bind, the root's move). A replica that does not
// lead leaves them PENDING and kicks the leader.
func TestFreshRunIsPlacedInItsStartTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.registerWith(t, 8, nil)
	noop := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop, Replicas: iptr(2)}}}

	follower := f.newRun(t, "follower", noop)
	_, err := f.s.advance(ctx, follower)
	require.NoError(t, err)
	for _, td := range f.tasks(t, follower, "s") {
		require.Equal(t, domain.TaskPending, td.Task.State)
	}
	require.Len(t, f.s.kick, 1, "a follower's start kicks the leader")
	<-f.s.kick
	res, err := f.s.runOnce(ctx) // as the leader's pass would
	require.NoError(t, err)
	require.Equal(t, 2, res.Placed)

	f.s.setLeader(true)
	key := f.newRun(t, "leader", noop)
	adv, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	require.True(t, adv.placed)
	require.Empty(t, f.s.kick, "every task was bound: no pass to kick")
	var ids []int64
	for _, td := range f.tasks(t, key, "s") {
		require.Equal(t, domain.TaskAssigned, td.Task.State)
		require.Len(t, td.Attempts, 1)
		require.Equal(t, w.ID, *td.Attempts[0].WorkerID)
		ids = append(ids, td.Attempts[0].ID)
	}
	pending, err := f.insp.ListPendingTasks(queue.WorkerQueue(w.ID))
	require.NoError(t, err)
	var dispatched []int64
	for _, m := range pending {
		var p queue.AttemptsPayload
		require.NoError(t, json.Unmarshal(m.Payload, &p))
		if specs := verifiedSpecs(t, w.ID, p.Specs); len(specs) > 0 && specs[0].Run == key.Run {
			dispatched = append(dispatched, p.AttemptIDs...)
			require.Len(t, p.Specs, 2)
		}
	}
	require.ElementsMatch(t, ids, dispatched)

	// Runs started together share a transaction, and their placement.
	var batch []domain.RunKey
	for _, name := range []string{"b1", "b2", "b3"} {
		batch = append(batch, f.newRun(t, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}}))
	}
	for _, err := range f.s.startRuns(ctx, batch) {
		require.NoError(t, err)
	}
	for _, k := range batch {
		tds := f.tasks(t, k, "s")
		require.Len(t, tds, 1)
		require.Equal(t, domain.TaskAssigned, tds[0].Task.State, k.Run)
	}
	require.Empty(t, f.s.kick)

	rows, err := f.db.Query(`SELECT action_name, type FROM run_events WHERE run_name = $1 ORDER BY id`, key.Run)
	require.NoError(t, err)
	defer rows.Close()
	var got []string
	for rows.Next() {
		var action, typ string
		require.NoError(t, rows.Scan(&action, &typ))
		got = append(got, action+" "+typ)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"a0 run.created", "a0 run.expanded", "s action.started", "s task.assigned",
		"s task.assigned", "s action.phase", "a0 action.phase"}, got)
}

// A fresh run's tasks are not bound in its start when the pass would place
// another task first (one PENDING in the same band or a higher one), when
// the pass is placing meanwhile, or past the free slots; the pass places
// the rest, kicked by the start.
func TestFreshPlacementLeavesThePassItsOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	f.registerWith(t, 6, nil)
	// A task no worker can run waits PENDING in the interactive band.
	waiting := f.newRun(t, "waiting", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: "container",
		Container: &domain.ContainerSpec{Image: "alpine"}}}})
	_, err := f.s.advance(ctx, waiting)
	require.NoError(t, err)
	f.s.setLeader(true)
	start := func(name, priority string, replicas int) (Advance, []store.TaskDetail) {
		t.Helper()
		key := f.newRun(t, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop,
			Priority: priority, Replicas: iptr(replicas)}}})
		for len(f.s.kick) > 0 {
			<-f.s.kick
		}
		adv, err := f.s.advance(ctx, key)
		require.NoError(t, err)
		require.Equal(t, !adv.placed, len(f.s.kick) == 1, "a start kicks a pass when it leaves a task")
		return adv, f.tasks(t, key, "s")
	}
	states := func(tds []store.TaskDetail) (out []domain.TaskState) {
		for _, td := range tds {
			out = append(out, td.Task.State)
		}
		return out
	}

	adv, tds := start("same-band", "interactive", 1)
	require.False(t, adv.placed)
	require.Equal(t, []domain.TaskState{domain.TaskPending}, states(tds), "an interactive task waits before it")
	adv, tds = start("batch", "batch", 1)
	require.False(t, adv.placed)
	require.Equal(t, []domain.TaskState{domain.TaskPending}, states(tds))

	_, err = f.s.runOnce(ctx) // places both; the container task still waits
	require.NoError(t, err)
	adv, tds = start("higher-band", "production", 2)
	require.True(t, adv.placed, "only lower bands wait")
	require.Equal(t, []domain.TaskState{domain.TaskAssigned, domain.TaskAssigned}, states(tds))

	locked, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() { // a pass reads or binds meanwhile: it holds the placement lock
		done <- f.st.InTx(ctx, func(tx *store.Store) error {
			if err := tx.Placement().Lock(ctx); err != nil {
				return err
			}
			close(locked)
			<-release
			return nil
		})
	}()
	<-locked
	adv, tds = start("during-a-pass", "production", 1)
	close(release)
	require.NoError(t, <-done)
	require.False(t, adv.placed)
	require.Equal(t, []domain.TaskState{domain.TaskPending}, states(tds))
	res, err := f.s.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Placed)

	adv, tds = start("past-the-slots", "production", 2) // 5 of 6 slots taken
	require.False(t, adv.placed)
	require.ElementsMatch(t, []domain.TaskState{domain.TaskAssigned, domain.TaskPending}, states(tds))
}
