package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// batchRun is a NewRun of twoSteps named name in p/d, with key as its
// Idempotency-Key ("" for none).
func batchRun(name, key string) store.NewRun {
	spec := twoSteps()
	spec.Normalize()
	return store.NewRun{Key: domain.RunKey{Project: "p", Domain: "d", Run: name}, Spec: spec, IdempotencyKey: key}
}

// count returns the rows of table in p/d.
func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table+` WHERE project = 'p' AND domain = 'd'`).Scan(&n))
	return n
}

// CreateRuns writes each new run with its QUEUED root action and its
// run.created event; a name already taken, or taken by an earlier item, is
// ErrConflict; an Idempotency-Key already used (or repeated in the batch)
// answers with the run it made, not created.
func TestCreateRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	_, _, err := st.Runs().CreateRun(ctx, batchRun("old", "k-old"))
	require.NoError(t, err)

	res, err := st.Runs().CreateRuns(ctx, []store.NewRun{
		batchRun("r1", ""), batchRun("old", ""), batchRun("r2", "k2"), batchRun("r1", ""),
		batchRun("other", "k-old"), batchRun("r3", "k2"), batchRun("r4", ""),
	})
	require.NoError(t, err)
	require.Len(t, res, 7)
	for _, i := range []int{0, 2, 6} {
		require.NoError(t, res[i].Err, i)
		require.True(t, res[i].Created, i)
		run := res[i].Detail.Run
		require.Equal(t, string(domain.PhaseQueued), run.Phase)
		require.False(t, run.CreatedAt.IsZero())
		require.Len(t, res[i].Detail.Actions, 1)
		require.Equal(t, domain.RootActionName, res[i].Detail.Actions[0].Action.Name)
		key := domain.RunKey{Project: "p", Domain: "d", Run: run.Name}
		require.Equal(t, []string{"run.created"}, events(t, db, key))
		got, err := st.Runs().GetRun(ctx, key)
		require.NoError(t, err)
		require.Equal(t, run.Spec, got.Run.Spec)
		require.Equal(t, string(domain.PhaseQueued), got.Actions[0].Action.Phase)
	}
	require.Equal(t, "r1", res[0].Detail.Run.Name)
	require.ErrorIs(t, res[1].Err, store.ErrConflict, "a name already stored")
	require.ErrorIs(t, res[3].Err, store.ErrConflict, "a name taken by an earlier item")
	require.NoError(t, res[4].Err)
	require.False(t, res[4].Created)
	require.Equal(t, "old", res[4].Detail.Run.Name, "a stored Idempotency-Key answers with its run")
	require.NoError(t, res[5].Err)
	require.False(t, res[5].Created)
	require.Equal(t, "r2", res[5].Detail.Run.Name, "a key repeated in the batch answers as its first item")
	require.Equal(t, 4, count(t, db, "runs"))
	require.Equal(t, 4, count(t, db, "actions"))
}

// A database error in the middle of a batch (here a trigger refusing one
// root action, after every runs row was inserted) or at its commit writes
// nothing: no run, action or event of any item.
func TestCreateRunsAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	_, err := db.Exec(`CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'refused'; END$$;
		CREATE TRIGGER refuse_boom BEFORE INSERT ON actions FOR EACH ROW
		WHEN (NEW.run_name = 'boom') EXECUTE FUNCTION refuse_boom()`)
	require.NoError(t, err)
	batch := make([]store.NewRun, 0, 50)
	for i := range 49 {
		batch = append(batch, batchRun(fmt.Sprintf("r%d", i), fmt.Sprintf("k%d", i)))
	}
	_, err = st.Runs().CreateRuns(ctx, append(batch, batchRun("boom", "")))
	require.ErrorContains(t, err, "refused")
	for _, table := range []string{"runs", "actions", "run_events"} {
		require.Zero(t, count(t, db, table), table)
	}

	cctx, cancel := context.WithCancel(ctx)
	_, err = st.Runs().CreateRuns(store.WithHold(cctx, cancel), batch) // cancelled between the last insert and the commit
	require.Error(t, err)
	for _, table := range []string{"runs", "actions", "run_events"} {
		require.Zero(t, count(t, db, table), table)
	}

	res, err := st.Runs().CreateRuns(ctx, batch)
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err, i)
		require.True(t, r.Created, i)
	}
	require.Equal(t, 49, count(t, db, "run_events"))
}
