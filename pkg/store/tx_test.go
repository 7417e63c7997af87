package store_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// InTx inserts its events just before its commit. When the insert
// fails, or fn panics, the transaction is rolled back: nothing it wrote
// stays, and the pools' connections, rolled back rather than closed, serve
// the next statements.
func TestInTxEndsOnAFailedInsertOrAPanic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, url := openOneConnectionPools(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	key := newRun(t, st, "r", twoSteps())
	resumed, _, err := st.Runs().RequestResume(ctx, key) // every pool has its connection
	require.NoError(t, err)
	backends := func() string {
		t.Helper()
		var pids string
		require.NoError(t, db.QueryRow(`SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&pids))
		return pids
	}
	before := backends()
	suspended := func() bool {
		t.Helper()
		run, err := st.Runs().GetRun(ctx, key)
		require.NoError(t, err)
		return run.Run.SuspendRequestedAt != nil
	}

	_, err = db.Exec(`CREATE FUNCTION refuse_suspend() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'refused'; END$$;
		CREATE TRIGGER refuse_suspend BEFORE INSERT ON run_events FOR EACH ROW
		WHEN (NEW.type = 'run.suspend_requested') EXECUTE FUNCTION refuse_suspend()`)
	require.NoError(t, err)
	_, _, err = st.Runs().RequestSuspend(ctx, key)
	require.ErrorContains(t, err, "refused")
	require.False(t, suspended(), "the run's update was rolled back with the insert")
	require.Equal(t, []string{"run.created", "run.resume_requested"}, events(t, db, key))

	require.Panics(t, func() {
		_ = st.InTx(ctx, func(tx *store.Store) error {
			_, _, err := tx.Runs().RequestResume(ctx, key)
			require.NoError(t, err)
			panic("fn panics")
		})
	})
	run, err := st.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	require.Equal(t, resumed.Version, run.Run.Version, "the panicked transaction was rolled back")
	require.Equal(t, []string{"run.created", "run.resume_requested"}, events(t, db, key))

	_, err = db.Exec(`DROP TRIGGER refuse_suspend ON run_events`)
	require.NoError(t, err)
	_, _, err = st.Runs().RequestSuspend(ctx, key)
	require.NoError(t, err)
	require.True(t, suspended())
	require.Equal(t, []string{"run.created", "run.resume_requested", "run.suspend_requested"}, events(t, db, key))
	require.Equal(t, before, backends(), "no connection was closed and replaced")
}

// A transaction that cannot begin (here its context ended before its first
// statement) fails that statement with the reason, whatever the statement
// reads, and the next transaction runs.
func TestInTxThatCannotBeginFailsItsStatement(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	key := newRun(t, st, "r", twoSteps())
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for name, first := range map[string]func(tx *store.Store) error{
		"a row": func(tx *store.Store) error {
			_, _, err := tx.Runs().TryLockRuns(ended, []domain.RunKey{key}, false)
			return err
		},
		"a scan": func(tx *store.Store) error { _, err := tx.Runs().LockRun(ended, key); return err },
	} {
		err := st.InTx(ended, first)
		require.ErrorIs(t, err, context.Canceled, name)
	}
	_, err := st.Runs().GetRun(context.Background(), key)
	require.NoError(t, err)
}
