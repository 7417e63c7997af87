package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// ExpandAndStart expands a fresh run and starts the steps given, tasks and
// started_at together; on a run expanded before it changes nothing at all:
// no action, no task, no event.
func TestExpandAndStartOnlyExpandsAFreshRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true"}, {Name: "b", Command: "true"}}}
	now := time.Now().UTC()
	start := func(key domain.RunKey) (bool, error) {
		var fresh bool
		err := st.InTx(ctx, func(tx *store.Store) error {
			if _, err := tx.LockRun(ctx, key); err != nil {
				return err
			}
			var err error
			fresh, err = tx.ExpandAndStart(ctx, key, spec.Steps, now, store.StartedStep{Action: "a",
				Tasks: store.NewTasks(key.Action("a"), spec.Steps[0], 0, now)})
			return err
		})
		return fresh, err
	}

	key := newRun(t, st, "fresh", spec)
	fresh, err := start(key)
	require.NoError(t, err)
	require.True(t, fresh)
	for name, started := range map[string]bool{"a": true, "b": false} {
		d, err := st.GetAction(ctx, key.Action(name))
		require.NoError(t, err)
		require.Equal(t, started, d.Action.StartedAt != nil, name)
		require.Len(t, d.Tasks, map[bool]int{true: 1}[started], name)
	}
	require.Equal(t, []string{"run.created", "run.expanded", "action.started"}, events(t, db, key))

	key = newRun(t, st, "expanded", spec)
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		_, err := tx.ExpandSteps(ctx, key, spec.Steps[1:])
		return err
	}))
	fresh, err = start(key)
	require.NoError(t, err)
	require.False(t, fresh)
	_, err = st.GetAction(ctx, key.Action("a"))
	require.ErrorIs(t, err, store.ErrNotFound, "no step action inserted")
	steps, err := st.StepActions(ctx, key)
	require.NoError(t, err)
	require.Len(t, steps, 1)
	require.Nil(t, steps[0].StartedAt)
	require.Equal(t, []string{"run.created", "run.expanded"}, events(t, db, key))
}

// TryLockRuns locks the named runs no other transaction holds and returns
// them by key; a missing run and a held one are left out, and a repeated
// key comes back once.
func TestTryLockRunsSkipsHeldAndMissingRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}}
	a, b, held := newRun(t, st, "a", spec), newRun(t, st, "b", spec), newRun(t, st, "held", spec)
	missing := domain.RunKey{Project: "p", Domain: "d", Run: "missing"}
	locked := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.InTx(ctx, func(tx *store.Store) error {
			if _, err := tx.LockRun(ctx, held); err != nil {
				return err
			}
			close(locked)
			<-release
			return nil
		})
	}()
	<-locked
	var got map[domain.RunKey]store.Run
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		var err error
		got, err = tx.TryLockRuns(ctx, []domain.RunKey{b, held, missing, a, b})
		return err
	}))
	close(release)
	require.NoError(t, <-done)
	require.Len(t, got, 2)
	for _, key := range []domain.RunKey{a, b} {
		require.Equal(t, key.Run, got[key].Name)
		require.Equal(t, string(domain.PhaseQueued), got[key].Phase)
		require.Len(t, got[key].Spec.Steps, 1)
	}
}

// Statements that take their keys in arrays (a start batch's, a scheduling
// pass's) run on EachCall's pool. A generic plan of such a statement, made
// while the tables are nearly empty, scans them whole, and a connection
// would keep it as they grow; on EachCall's pool Postgres plans them at each
// call: once runs has grown, the lock of a batch's runs takes its primary
// key. The main pool keeps generic plans.
func TestEachCallPlansAtEachCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, url := openOneConnectionPools(t)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}}
	keys := []domain.RunKey{newRun(t, st, "a", spec), newRun(t, st, "b", spec)}
	lock := func(on *store.Store, then func(tx *store.Store)) {
		t.Helper()
		require.NoError(t, on.InTx(ctx, func(tx *store.Store) error {
			_, err := tx.TryLockRuns(ctx, keys)
			then(tx)
			return err
		}))
	}
	// Past the five calls after which Postgres may keep a generic plan.
	for range 6 {
		lock(st.EachCall(), func(*store.Store) {})
		lock(st, func(*store.Store) {})
	}
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.ExecContext(ctx, `INSERT INTO runs (project, domain, name, spec)
		SELECT project, domain, name || '-' || i, spec FROM runs, generate_series(1, 5000) i WHERE name = 'a'`)
	require.NoError(t, err)
	const stmt = "FOR UPDATE SKIP LOCKED"
	lock(st.EachCall(), func(tx *store.Store) {
		name, generic, custom, err := tx.PreparedPlans(ctx, stmt)
		require.NoError(t, err)
		require.Zero(t, generic, "generic plans")
		require.Equal(t, int64(7), custom, "custom plans")
		plan, err := tx.Explain(ctx, "EXECUTE "+name+"('{p,p}', '{d,d}', '{a,b}')")
		require.NoError(t, err)
		require.Contains(t, plan, "runs_pkey")
		require.NotContains(t, plan, "Seq Scan")
	})
	lock(st, func(tx *store.Store) {
		_, generic, _, err := tx.PreparedPlans(ctx, stmt)
		require.NoError(t, err)
		require.NotZero(t, generic, "the main pool's generic plans")
	})
}

// A Strings value reaches Postgres as the array it holds, whatever its
// elements, cast to text[] from text or straight.
func TestStringsRoundTrip(t *testing.T) {
	t.Parallel()
	_, db := openWithDB(t)
	for _, v := range []store.Strings{nil, {}, {""}, {"a", "b"}, {`q"uote`, `back\slash`, "com,ma", "{brace}", "NULL",
		" spaced ", "ünï", `\"`}} {
		for _, cast := range []string{"CAST(CAST($1 AS text) AS text[])", "CAST($1 AS text[])"} {
			var got store.Strings
			require.NoError(t, db.QueryRow("SELECT "+cast, v).Scan(&got), cast)
			require.Equal(t, len(v), len(got), "%q via %s", v, cast)
			for i := range v {
				require.Equal(t, v[i], got[i], "%q via %s", v, cast)
			}
		}
	}
}
