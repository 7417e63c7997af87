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

// startedTasks creates a run of one step with n replicas and returns its
// task ids.
func startedTasks(t *testing.T, st *store.Store, name string, n int) []int64 {
	t.Helper()
	key := newRun(t, st, name, domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Replicas: intp(n)}}})
	storetest.StartSteps(t, st, key)
	var ids []int64
	for _, td := range tasksOf(t, st, key, "s") {
		ids = append(ids, td.Task.ID)
	}
	require.Len(t, ids, n)
	return ids
}

// attemptIn assigns the task to w and reports the attempt through states.
func attemptIn(t *testing.T, st *store.Store, w store.Worker, taskID int64, states ...store.Report) store.Attempt {
	t.Helper()
	ctx := context.Background()
	a, ok, err := storetest.AssignTask(ctx, st, taskID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	for _, rep := range states {
		_, err := storetest.ReportAttempt(ctx, st, a.ID, rep)
		require.NoError(t, err)
	}
	return a
}

var running = store.Report{State: domain.TaskRunning}

func getWorker(t *testing.T, st *store.Store, id string) (store.WorkerLoad, bool) {
	t.Helper()
	ws, err := st.Workers().ListWorkers(context.Background())
	require.NoError(t, err)
	for _, w := range ws {
		if w.ID == id {
			return w, true
		}
	}
	return store.WorkerLoad{}, false
}

// LoseUnheldAttempts ends WORKER_FAILED exactly the attempts of its worker
// that the beat does not hold and the loss covers (domain.BeatLoss.Lost),
// and writes their events; a loss of no states ends none. (Which loss a
// heartbeat applies is domain.LossOnBeat's, composed by the api.)
func TestLoseUnheldAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	w, other := registerWorker(t, st), registerWorker(t, st)
	tasks := startedTasks(t, st, "lose", 6)
	held := attemptIn(t, st, w, tasks[0], running)
	forgotten := attemptIn(t, st, w, tasks[1], running)
	building := attemptIn(t, st, w, tasks[2], store.Report{State: domain.TaskBuilding})
	queued := attemptIn(t, st, w, tasks[3]) // ASSIGNED: may wait in the queue
	fresh := attemptIn(t, st, w, tasks[4], running)
	elsewhere := attemptIn(t, st, other, tasks[5], running)
	cutoff := time.Now()
	_, err := db.Exec(`UPDATE attempts SET updated_at = now() + interval '1 hour' WHERE id = $1`, fresh.ID)
	require.NoError(t, err)
	loss := domain.BeatLoss{States: []domain.TaskState{domain.TaskBuilding, domain.TaskRunning}, ReportedBefore: cutoff}

	none, err := st.Workers().LoseUnheldAttempts(ctx, w.ID, nil, domain.BeatLoss{ReportedBefore: cutoff}, time.Now())
	require.NoError(t, err)
	require.Empty(t, none, "no states: none")

	var want []int64
	for _, a := range []store.Attempt{held, forgotten, building, queued, fresh} {
		r, err := st.Attempts().GetAttemptRun(ctx, a.ID)
		require.NoError(t, err)
		if loss.Lost(r.Attempt.State, r.Attempt.UpdatedAt, a.ID == held.ID) {
			want = append(want, a.ID)
		}
	}
	require.Equal(t, []int64{forgotten.ID, building.ID}, want, "the rule's answer, for the test's rows")
	lost, err := st.Workers().LoseUnheldAttempts(ctx, w.ID, []int64{held.ID}, loss, time.Now())
	require.NoError(t, err)
	var got []int64
	for _, l := range lost {
		require.Equal(t, w.ID, l.WorkerID)
		got = append(got, l.ID)
	}
	require.ElementsMatch(t, want, got)
	for id, state := range map[int64]domain.TaskState{forgotten.ID: domain.TaskWorkerFailed,
		building.ID: domain.TaskWorkerFailed, held.ID: domain.TaskRunning, queued.ID: domain.TaskAssigned,
		fresh.ID: domain.TaskRunning, elsewhere.ID: domain.TaskRunning} {
		r, err := st.Attempts().GetAttemptRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, state, r.Attempt.State, id)
	}
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM run_events WHERE type = 'attempt.WORKER_FAILED'
		AND data->>'cause' = 'worker_lost'`).Scan(&n))
	require.Equal(t, 2, n)
}

func TestDeregisterWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w, other := registerWorker(t, st), registerWorker(t, st)
	a := attemptIn(t, st, w, startedTasks(t, st, "dereg", 1)[0], running)

	lost, err := st.Workers().DeregisterWorker(ctx, w.ID)
	require.NoError(t, err)
	require.Len(t, lost, 1)
	require.Equal(t, a.ID, lost[0].ID)
	_, ok := getWorker(t, st, w.ID)
	require.False(t, ok)
	_, err = st.Workers().DeregisterWorker(ctx, w.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	states, err := st.Workers().WorkerStates(ctx, []string{w.ID, other.ID, "not-a-uuid"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{other.ID: store.WorkerAlive}, states, "a deregistered worker is unknown")
}

// A heartbeat and a registration are stamped with Postgres's now(): the
// transaction's, to the microsecond, whatever the Go clock says.
func TestHeartbeatsStampedOnPostgresClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	var w store.Worker
	var txNow time.Time
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		watch, err := tx.Workers().LockLivenessWatch(ctx)
		txNow = watch.Now
		if err != nil {
			return err
		}
		w, err = tx.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 1})
		return err
	}))
	require.True(t, w.LastHeartbeatAt.Equal(txNow), "registered at %s, the transaction began at %s", w.LastHeartbeatAt, txNow)

	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		watch, err := tx.Workers().LockLivenessWatch(ctx)
		txNow = watch.Now
		if err != nil {
			return err
		}
		return tx.Workers().RecordBeat(ctx, w.ID, false)
	}))
	got, err := st.Workers().LastHeartbeat(ctx, w.ID)
	require.NoError(t, err)
	require.True(t, got.Equal(txNow), "beat at %s, the transaction began at %s", got, txNow)
}

// The liveness watch and the heartbeat path's stamp: unset until written
// (a migrated database has had no pass and no api), then as written, on
// Postgres's clock.
func TestLivenessWatchRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w, err := st.Workers().LockLivenessWatch(ctx)
	require.NoError(t, err)
	require.False(t, w.Now.IsZero())
	require.True(t, w.CheckedAt.IsZero() && w.Origin.IsZero() && w.DeferredAt.IsZero() && w.ServedAt.IsZero(),
		"nothing written yet: %+v", w)

	require.NoError(t, st.Workers().StampHeartbeatPath(ctx))
	origin, deferred := w.Now.Add(-time.Minute), w.Now.Add(-time.Second)
	require.NoError(t, st.Workers().SaveLivenessWatch(ctx, origin, deferred))
	again, err := st.Workers().LockLivenessWatch(ctx)
	require.NoError(t, err)
	require.True(t, again.Origin.Equal(origin))
	require.True(t, again.DeferredAt.Equal(deferred))
	require.False(t, again.CheckedAt.Before(w.Now), "checked at the saving statement's now()")
	require.False(t, again.ServedAt.Before(w.Now), "stamped at the stamping statement's now()")
	require.False(t, again.Now.Before(again.CheckedAt))

	require.NoError(t, st.Workers().SaveLivenessWatch(ctx, origin, time.Time{}))
	again, err = st.Workers().LockLivenessWatch(ctx)
	require.NoError(t, err)
	require.True(t, again.DeferredAt.IsZero(), "no deferral: NULL")
}

// SilentWorkers and MarkWorkersDead judge max(last heartbeat, origin)
// against now() - grace: a worker silent past the grace is silent only if
// the origin is older too, and one that beat meanwhile is not marked.
func TestSilenceCountsFromTheGraceOrigin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	a, b, fresh := registerWorker(t, st), registerWorker(t, st), registerWorker(t, st)
	const grace = time.Minute
	for _, id := range []string{a.ID, b.ID} {
		require.NoError(t, storetest.Silence(ctx, db, id, 2*grace))
	}
	w, err := st.Workers().LockLivenessWatch(ctx)
	require.NoError(t, err)
	old, recent := w.Now.Add(-time.Hour), w.Now.Add(-grace/2)

	ids, alive, err := st.Workers().SilentWorkers(ctx, old, grace)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{a.ID, b.ID}, ids)
	require.Equal(t, 3, alive)
	ids, alive, err = st.Workers().SilentWorkers(ctx, recent, grace)
	require.NoError(t, err)
	require.Empty(t, ids, "silence counts from the origin: under a grace ago")
	require.Zero(t, alive)

	dead, err := st.Workers().MarkWorkersDead(ctx, []string{a.ID, b.ID, fresh.ID}, recent, grace)
	require.NoError(t, err)
	require.Empty(t, dead, "not silent since the origin")
	require.NoError(t, st.Workers().RecordBeat(ctx, b.ID, false)) // b beats after it was found silent
	dead, err = st.Workers().MarkWorkersDead(ctx, []string{a.ID, b.ID, fresh.ID}, old, grace)
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, dead)
	states, err := st.Workers().WorkerStates(ctx, []string{a.ID, b.ID, fresh.ID})
	require.NoError(t, err)
	require.Equal(t, map[string]string{a.ID: store.WorkerDead, b.ID: store.WorkerAlive, fresh.ID: store.WorkerAlive}, states)
	require.ErrorIs(t, st.Workers().RecordBeat(ctx, a.ID, false), store.ErrNotFound, "a dead worker re-registers")
}
