package store_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// A root move in a transaction costs no statement of its own when nothing
// follows it: the insert of the transaction's events makes it. A statement
// after it sees it, an event after it comes after its event, a move from a
// phase a0 is not in only mirrors the run row (no event), and a savepoint
// rolled back takes back only the move made in it.
func TestRootMoveRidesTheEventsInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db, h := openCounted(t)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}}
	now := time.Now().UTC()
	inTx := func(key domain.RunKey, fn func(tx *store.Store) error) map[string]int64 {
		t.Helper()
		before := countByOperation(t, h)
		err := st.InTx(ctx, func(tx *store.Store) error {
			if _, err := tx.Runs().LockRun(ctx, key); err != nil {
				return err
			}
			return fn(tx)
		})
		require.NoError(t, err)
		after := countByOperation(t, h)
		for op, n := range before {
			if after[op] -= n; after[op] == 0 {
				delete(after, op)
			}
		}
		return after
	}

	key := newRun(t, st, "at-commit", spec)
	ops := inTx(key, func(tx *store.Store) error {
		return tx.Actions().SetRootPhase(ctx, key, domain.PhaseQueued, domain.PhaseRunning, now)
	})
	require.Equal(t, map[string]int64{"LockRun": 1, "flushEvents": 1}, ops, "the move rides the events' insert")
	requirePhases(t, st, key, domain.PhaseRunning, domain.PhaseRunning)
	require.Equal(t, "action.phase", last(events(t, db, key)))

	ops = inTx(key, func(tx *store.Store) error {
		if err := tx.Actions().SetRootPhase(ctx, key, domain.PhaseRunning, domain.PhaseSucceeded, now); err != nil {
			return err
		}
		run, err := tx.Runs().LockRun(ctx, key)
		if err != nil {
			return err
		}
		require.Equal(t, string(domain.PhaseRunning), run.Phase, "a later statement does not see the move")
		require.Nil(t, run.EndedAt)
		return nil
	})
	require.Equal(t, map[string]int64{"LockRun": 2, "flushEvents": 1}, ops, "the move is made at commit, still with the insert")
	requirePhases(t, st, key, domain.PhaseSucceeded, domain.PhaseSucceeded)
	evs := events(t, db, key)
	require.Equal(t, []string{"action.phase", "action.phase"}, evs[len(evs)-2:])

	for _, next := range []bool{false, true} {
		key := newRun(t, st, map[bool]string{false: "mirror-at-commit", true: "mirror-next"}[next], spec)
		inTx(key, func(tx *store.Store) error {
			if err := tx.Actions().SetRootPhase(ctx, key, domain.PhasePaused, domain.PhaseRunning, now); err != nil || !next {
				return err
			}
			_, err := tx.Runs().LockRun(ctx, key)
			return err
		})
		requirePhases(t, st, key, domain.PhaseRunning, domain.PhaseQueued)
		require.Equal(t, []string{"run.created"}, events(t, db, key), "no event when a0 did not move")
	}

	boom := errors.New("boom")
	key = newRun(t, st, "savepoint", spec)
	inTx(key, func(tx *store.Store) error {
		err := tx.InTx(ctx, func(sp *store.Store) error {
			return errors.Join(sp.Actions().SetRootPhase(ctx, key, domain.PhaseQueued, domain.PhaseRunning, now), boom)
		})
		require.ErrorIs(t, err, boom)
		return nil
	})
	requirePhases(t, st, key, domain.PhaseQueued, domain.PhaseQueued)
	require.Equal(t, []string{"run.created"}, events(t, db, key), "the savepoint's move is taken back")
	inTx(key, func(tx *store.Store) error {
		if err := tx.Actions().SetRootPhase(ctx, key, domain.PhaseQueued, domain.PhaseRunning, now); err != nil {
			return err
		}
		require.ErrorIs(t, tx.InTx(ctx, func(*store.Store) error { return boom }), boom)
		return nil
	})
	requirePhases(t, st, key, domain.PhaseRunning, domain.PhaseRunning)
	require.Equal(t, []string{"run.created", "action.phase"}, events(t, db, key), "a move before the savepoint stays")

	key = newRun(t, st, "outside", spec)
	require.NoError(t, st.Actions().SetRootPhase(ctx, key, domain.PhaseQueued, domain.PhaseRunning, now))
	requirePhases(t, st, key, domain.PhaseRunning, domain.PhaseRunning)
	require.Equal(t, []string{"run.created", "action.phase"}, events(t, db, key))
}

// The root moves of several runs left one after the other are made
// together by the insert of the transaction's events, each event kept in
// its place only when its a0 moved; a second move of a run makes the
// first one before it.
func TestRootMovesOfSeveralRunsRideTheEventsInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db, h := openCounted(t)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}}
	now := time.Now().UTC()
	a, b, c := newRun(t, st, "a", spec), newRun(t, st, "b", spec), newRun(t, st, "c", spec)
	before := countByOperation(t, h)
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return errors.Join(tx.Actions().SetRootPhase(ctx, a, domain.PhaseQueued, domain.PhaseRunning, now),
			tx.Actions().SetRootPhase(ctx, b, domain.PhasePaused, domain.PhaseRunning, now), // a0 is QUEUED: no event
			tx.Actions().SetRootPhase(ctx, c, domain.PhaseQueued, domain.PhaseRunning, now),
			tx.Actions().SetRootPhase(ctx, a, domain.PhaseRunning, domain.PhaseSucceeded, now)) // makes the three first
	}))
	after := countByOperation(t, h)
	require.Equal(t, int64(1), after["SetRootPhase"]-before["SetRootPhase"], "the three moves in one statement")
	require.Equal(t, int64(1), after["flushEvents"]-before["flushEvents"], "a's second move rides the insert")
	var total int64
	for op, n := range after {
		total += n - before[op]
	}
	require.Equal(t, int64(2), total, "no other statement")
	requirePhases(t, st, a, domain.PhaseSucceeded, domain.PhaseSucceeded)
	requirePhases(t, st, b, domain.PhaseRunning, domain.PhaseQueued)
	requirePhases(t, st, c, domain.PhaseRunning, domain.PhaseRunning)
	require.Equal(t, []string{"run.created", "action.phase", "action.phase"}, events(t, db, a))
	require.Equal(t, []string{"run.created"}, events(t, db, b))
	require.Equal(t, []string{"run.created", "action.phase"}, events(t, db, c))

	d, e := newRun(t, st, "d", spec), newRun(t, st, "e", spec)
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return errors.Join(tx.Actions().SetRootPhase(ctx, d, domain.PhasePaused, domain.PhaseRunning, now),
			tx.Actions().SetRootPhase(ctx, e, domain.PhaseQueued, domain.PhaseRunning, now))
	}))
	requirePhases(t, st, d, domain.PhaseRunning, domain.PhaseQueued)
	requirePhases(t, st, e, domain.PhaseRunning, domain.PhaseRunning)
	require.Equal(t, []string{"run.created"}, events(t, db, d), "the insert drops the event of a0 that did not move")
	require.Equal(t, []string{"run.created", "action.phase"}, events(t, db, e))
}

// openCounted opens a store on a fresh database, its statements counted by
// operation into h, and the same database through database/sql.
func openCounted(t *testing.T) (*store.Store, *sql.DB, *prometheus.HistogramVec) {
	t.Helper()
	h := store.NewOperationSeconds()
	url := storetest.NewURL(t)
	st, err := store.Open(context.Background(), url, store.Config{MaxOpenConns: 4, OperationSeconds: h})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return st, db, h
}

// requirePhases checks the phases of key's run row and of its a0.
func requirePhases(t *testing.T, st *store.Store, key domain.RunKey, run, root domain.Phase) {
	t.Helper()
	d, err := st.Runs().GetRun(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, string(run), d.Run.Phase, "the run row")
	a0, err := st.Actions().GetAction(context.Background(), key.Action(domain.RootActionName))
	require.NoError(t, err)
	require.Equal(t, string(root), a0.Action.Phase, "a0")
}

// countByOperation returns the statements h counted, by operation.
func countByOperation(t *testing.T, h *prometheus.HistogramVec) map[string]int64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]int64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = int64(m.GetHistogram().GetSampleCount())
		}
	}
	return out
}

func last(s []string) string { return s[len(s)-1] }
