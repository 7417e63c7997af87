package beatpath

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// servedAt returns the heartbeat path's stamp (zero: never) and
// Postgres's now.
func servedAt(t *testing.T, st *store.Store) (stamp, now time.Time) {
	t.Helper()
	w, err := st.Workers().LockLivenessWatch(context.Background())
	require.NoError(t, err)
	return w.ServedAt, w.Now
}

// TestRunStampsWhileItRuns: a running stamper stamps the heartbeat path
// from its start and again every Every, and returns when its context ends;
// a stamp is Postgres's now().
func TestRunStampsWhileItRuns(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	const every = 20 * time.Millisecond
	s := New(st, slog.New(slog.DiscardHandler), Config{Every: every})
	stamp, _ := servedAt(t, st)
	require.True(t, stamp.IsZero(), "no api has served yet")

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })
	var first time.Time
	require.Eventually(t, func() bool { first, _ = servedAt(t, st); return !first.IsZero() }, 10*time.Second, every)
	require.Eventually(t, func() bool { later, _ := servedAt(t, st); return later.After(first) }, 10*time.Second, every,
		"stamped again every %s", every)
	stop()
	wg.Wait()

	last, _ := servedAt(t, st)
	require.NoError(t, s.Stamp(context.Background()))
	again, now := servedAt(t, st)
	require.True(t, again.After(last), "Stamp writes Postgres's now()")
	require.False(t, again.After(now))
}
