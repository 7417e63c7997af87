package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// TestExistingRunsAndLiveAttempts: of the keys an executor's sweep names,
// ExistingRuns answers the runs, once each, in key order, and not another
// project's or domain's run of the same name nor a deleted one;
// LiveAttempts answers the attempts ASSIGNED, BUILDING or RUNNING, not an
// ended or unknown one.
func TestExistingRunsAndLiveAttempts(t *testing.T) {
	t.Parallel()
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	ctx := context.Background()
	a := largeStep(t, st, db, "a", 3)
	b := largeStep(t, st, db, "b", 1)
	key := func(p, d, r string) domain.RunKey { return domain.RunKey{Project: p, Domain: d, Run: r} }

	got, err := st.Runs().ExistingRuns(ctx, []domain.RunKey{b, key("p", "d", "gone"), a, key("q", "d", "a"),
		key("p", "e", "a"), b})
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{a, b}, got)
	got, err = st.Runs().ExistingRuns(ctx, []domain.RunKey{key("q", "d", "a"), key("p", "e", "a"), key("p", "a", "d")})
	require.NoError(t, err)
	require.Empty(t, got, "a run's name under another project or domain is another run")
	got, err = st.Runs().ExistingRuns(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)

	_, err = db.Exec(`UPDATE runs SET phase = 'SUCCEEDED', ended_at = now() WHERE name = 'b'`)
	require.NoError(t, err)
	_, err = st.Runs().DeleteRun(ctx, b)
	require.NoError(t, err)
	got, err = st.Runs().ExistingRuns(ctx, []domain.RunKey{a, b})
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{a}, got, "a deleted run is gone")

	var ids []int64
	rows, err := db.Query(`SELECT a.id FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.run_name = 'a' ORDER BY a.id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, 3)
	for i, st := range []domain.TaskState{domain.TaskAssigned, domain.TaskRunning} {
		_, err := db.Exec(fmt.Sprintf(`UPDATE attempts SET state = %d WHERE id = $1`, st), ids[i])
		require.NoError(t, err)
	}
	live, err := st.Attempts().LiveAttempts(ctx, []int64{ids[2], ids[1], 1 << 40, ids[0], ids[1]})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0], ids[1]}, live, "ASSIGNED and RUNNING, not SUCCEEDED nor unknown")
}
