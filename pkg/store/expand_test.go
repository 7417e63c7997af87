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

// ExpandAndStartRuns expands a fresh run and starts the steps given, tasks and
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
			if _, err := tx.Runs().LockRun(ctx, key); err != nil {
				return err
			}
			expanded, err := tx.Runs().ExpandAndStartRuns(ctx, now, store.FreshRun{Key: key, Steps: spec.Steps,
				Started: []store.StartedStep{{Action: "a", Tasks: store.NewTaskRows(key.Action("a"), 0,
					domain.StepTasks(spec.Steps[0], domain.DefaultMaxSystemFailures, now))}}})
			fresh = err == nil && expanded[0]
			return err
		})
		return fresh, err
	}

	key := newRun(t, st, "fresh", spec)
	fresh, err := start(key)
	require.NoError(t, err)
	require.True(t, fresh)
	for name, started := range map[string]bool{"a": true, "b": false} {
		d, err := st.Actions().GetAction(ctx, key.Action(name))
		require.NoError(t, err)
		require.Equal(t, started, d.Action.StartedAt != nil, name)
		require.Len(t, d.Tasks, map[bool]int{true: 1}[started], name)
	}
	require.Equal(t, []string{"run.created", "run.expanded", "action.started"}, events(t, db, key))

	key = newRun(t, st, "expanded", spec)
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		_, err := tx.Runs().ExpandSteps(ctx, key, spec.Steps[1:])
		return err
	}))
	fresh, err = start(key)
	require.NoError(t, err)
	require.False(t, fresh)
	_, err = st.Actions().GetAction(ctx, key.Action("a"))
	require.ErrorIs(t, err, store.ErrNotFound, "no step action inserted")
	steps, err := st.Actions().StepActions(ctx, key)
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
			if _, err := tx.Runs().LockRun(ctx, held); err != nil {
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
		got, _, err = tx.Runs().TryLockRuns(ctx, []domain.RunKey{b, held, missing, a, b}, false)
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

// the by-key pool keeps one plan of each statement, and makes it again as
// the tables grow. A join of actions with keys in arrays, on the name a0
// as a parameter, planned while actions holds a few rows, walks the whole
// primary key of actions for that name; once actions has grown and the
// connection's plans are due, its next use drops them, and the join is
// planned from the keys.
func TestByKeyKeepsPlansAndMakesThemAgainAsTablesGrow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, url := openOneConnectionPools(t)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}}
	newRun(t, st, "a", spec)
	newRun(t, st, "b", spec)
	by := store.ByKeyPool(st)
	const join = `SELECT count(*) FROM actions x,
		unnest(CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[])) AS m(p, d, r)
		WHERE x.project = m.p AND x.domain = m.d AND x.run_name = m.r AND x.name = ?`
	count := func() {
		t.Helper()
		n, err := by.Count(ctx, join, store.Strings{"p", "p"}, store.Strings{"d", "d"}, store.Strings{"a", "b"}, "a0")
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
	}
	for range 6 {
		count()
	}
	_, generic, custom, err := by.PreparedPlans(ctx, "AS m(p, d, r)")
	require.NoError(t, err)
	require.Equal(t, int64(6), generic, "the join's kept plan")
	require.Zero(t, custom)
	growActions(t, url)
	st.ShiftByKeyClock(time.Hour)
	count()
	plan := explainPrepared(t, by, "AS m(p, d, r)", "'{p,p}', '{d,d}', '{a,b}', 'a0'")
	require.Contains(t, plan, "actions_pkey")
	require.NotContains(t, plan, "Index Cond: (name = ", "a walk of actions' whole key:\n%s", plan)
}

// The root moves of several runs reach actions by the moves' keys, a0's
// name included, even on a plan made while actions held a few rows: with
// the name a parameter of its own, that plan walked the whole primary key
// of actions for it.
func TestRootMovesOfSeveralRunsReachActionsByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, url := openOneConnectionPools(t)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}}
	a, b := newRun(t, st, "a", spec), newRun(t, st, "b", spec)
	by := store.ByKeyPool(st)
	// Each transaction moves both runs' a0 and back: the second move of a
	// makes the two first ones at once, in one statement of arrays.
	for range 3 {
		require.NoError(t, by.InTx(ctx, func(tx *store.Store) error {
			now := time.Now().UTC()
			for _, m := range []struct {
				k        domain.RunKey
				from, to domain.Phase
			}{{a, domain.PhaseQueued, domain.PhaseRunning}, {b, domain.PhaseQueued, domain.PhaseRunning},
				{a, domain.PhaseRunning, domain.PhaseQueued}, {b, domain.PhaseRunning, domain.PhaseQueued}} {
				if err := tx.Actions().SetRootPhase(ctx, m.k, m.from, m.to, now); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	growActions(t, url) // no new plan: too few uses, and no time
	plan := explainPrepared(t, by, "RETURNING 1) SELECT ord FROM a",
		"'{p,p}', '{d,d}', '{a,b}', '{QUEUED,QUEUED}', '{RUNNING,RUNNING}', "+
			"'{2026-01-01,2026-01-01}', '{f,f}', '{1,2}', 'a0'")
	require.Contains(t, plan, "actions_pkey")
	require.NotContains(t, plan, "Index Cond: (name = ", "a walk of actions' whole key:\n%s", plan)
}

// growActions adds 5,000 runs, each with its a0, to the database of url.
func growActions(t *testing.T, url string) {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`INSERT INTO runs (project, domain, name, spec)
		SELECT project, domain, name || '-' || i, spec FROM runs, generate_series(1, 5000) i WHERE name = 'a'`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO actions (project, domain, run_name, name, kind, phase)
		SELECT project, domain, name, 'a0', 'workflow', 'QUEUED' FROM runs WHERE name LIKE 'a-%'`)
	require.NoError(t, err)
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
