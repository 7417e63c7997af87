package store_test

import (
	"context"
	"database/sql"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// Pass's connection keeps the plan of each statement made at its first
// call until replanPass drops them, once the ids have grown to twice their
// mark plus 256: the next call then plans for the tables as they are. The
// plan of NextWakeAt made on nearly empty tables expects a few dozen
// waiting actions; made again at 5,000 actions, it expects more.
func TestPassKeepsPlansUntilReplan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, url := openOneConnectionPools(t)
	key := newRun(t, st, "r", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}})
	_, err := store.PassConn(st).Placement().NextWakeAt(ctx)
	require.NoError(t, err)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.ExecContext(ctx, `INSERT INTO actions (project, domain, run_name, name, kind)
		SELECT $1, $2, $3, 'x' || i, 'step' FROM generate_series(1, 5000) i`, key.Project, key.Domain, key.Run)
	require.NoError(t, err)
	now := "'" + time.Now().UTC().Format(time.RFC3339Nano) + "'"
	waiting := func() int {
		t.Helper()
		plan := explainPrepared(t, store.PassConn(st), "min(not_before)", now+", "+now)
		m := regexp.MustCompile(`actions_waiting on actions +\(cost=[0-9.]+ rows=([0-9]+)`).FindStringSubmatch(plan)
		require.NotNil(t, m, plan)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	kept := waiting()
	require.Equal(t, kept, waiting(), "the kept plan")

	for _, step := range []struct {
		id     int64
		replan bool
	}{{255, false}, {256, true}, {767, false}, {768, true}, {1000, false}} {
		replanned, err := store.Replan(ctx, st, step.id)
		require.NoError(t, err)
		require.Equal(t, step.replan, replanned, "Replan(%d)", step.id)
	}
	require.Greater(t, waiting(), kept, "waiting actions expected by the plan made again")
}
