package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// A reader that repeatedly reads "id > last" while many transactions write
// events of one project/domain concurrently ends with every row, in id
// order: the feed lock makes ids commit in order, so no read skips one.
func TestEventsAfterSkipsNoRowUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	key := newRun(t, st, "r", twoSteps())
	f := store.EventFilter{Project: key.Project, Domain: key.Domain}

	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := range 25 {
				if (w+i)%2 == 0 {
					_, _ = st.RequestSuspend(ctx, key)
				} else {
					_, _ = st.RequestResume(ctx, key)
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()

	var seen []int64
	read := func() {
		last := int64(0)
		if len(seen) > 0 {
			last = seen[len(seen)-1]
		}
		rows, err := st.EventsAfter(ctx, f, last, 7)
		require.NoError(t, err)
		for _, r := range rows {
			seen = append(seen, r.ID)
		}
	}
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		read()
	}
	for before := -1; before != len(seen); {
		before = len(seen)
		read()
	}
	all, err := st.EventsAfter(ctx, f, 0, 1000)
	require.NoError(t, err)
	var want []int64
	for _, r := range all {
		want = append(want, r.ID)
	}
	require.Equal(t, want, seen)
}

// EventsAfter with a run reads that run's rows only; RunPhase reads its
// phase and refuses an unknown run.
func TestEventsAfterOfOneRunAndRunPhase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	a := newRun(t, st, "a", twoSteps())
	newRun(t, st, "b", twoSteps())
	rows, err := st.EventsAfter(ctx, store.EventFilter{Project: a.Project, Domain: a.Domain, Run: a.Run}, 0, 100)
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	for _, r := range rows {
		require.Equal(t, "a", r.RunName)
	}
	all, err := st.EventsAfter(ctx, store.EventFilter{Project: a.Project, Domain: a.Domain}, 0, 100)
	require.NoError(t, err)
	require.Greater(t, len(all), len(rows))

	phase, err := st.RunPhase(ctx, a)
	require.NoError(t, err)
	require.False(t, phase.IsTerminal())
	_, err = st.RunPhase(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "nope"})
	require.ErrorIs(t, err, store.ErrNotFound)
}

// ListenEvents reports its LISTEN, then a notice per run whose events a
// transaction committed.
func TestListenEventsNotifiesCommittedRuns(t *testing.T) {
	t.Parallel()
	url := storetest.NewURL(t)
	st, err := store.Open(context.Background(), url, store.Config{MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	connected := make(chan struct{}, 1)
	notices := make(chan store.EventNotice, 16)
	stopped := make(chan error)
	go func() {
		stopped <- store.ListenEvents(ctx, url, time.Second, func() { connected <- struct{}{} },
			func(error) {}, func(n store.EventNotice) { notices <- n })
	}()
	<-connected
	key := newRun(t, st, "r", twoSteps())
	select {
	case n := <-notices:
		require.Equal(t, store.EventNotice{Project: key.Project, Domain: key.Domain, Run: key.Run}, n)
	case <-time.After(10 * time.Second):
		t.Fatal("no notice")
	}
	cancel()
	require.ErrorIs(t, <-stopped, context.Canceled)
}

// RunEventsAfter reads the run's phase and its rows after an id in one
// statement, the same rows as EventsAfter; an unknown run is ErrNotFound.
func TestRunEventsAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	key := newRun(t, st, "r", twoSteps())
	_, err := st.RequestSuspend(ctx, key)
	require.NoError(t, err)
	want, err := st.EventsAfter(ctx, store.EventFilter{Project: key.Project, Domain: key.Domain, Run: key.Run}, 0, 100)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(want), 2)
	phase, _, got, err := st.RunEventsAfter(ctx, key, want[0].ID, 100)
	require.NoError(t, err)
	require.False(t, phase.IsTerminal())
	require.Len(t, got, len(want)-1)
	for i, e := range got {
		w := want[i+1]
		require.Equal(t, w.ID, e.ID)
		require.Equal(t, w.Type, e.Type)
		require.Equal(t, w.RunName, e.RunName)
		require.Equal(t, w.ActionName, e.ActionName)
		require.JSONEq(t, string(w.Data), string(e.Data))
		require.True(t, w.CreatedAt.Equal(e.CreatedAt))
	}
	_, _, _, err = st.RunEventsAfter(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "nope"}, 0, 10)
	require.ErrorIs(t, err, store.ErrNotFound)

	// An ended run whose restart is pending says so: it will run again.
	_, err = db.ExecContext(ctx, `UPDATE runs SET phase = 'FAILED', ended_at = now() WHERE name = $1`, key.Run)
	require.NoError(t, err)
	phase, restarting, _, err := st.RunEventsAfter(ctx, key, 0, 100)
	require.NoError(t, err)
	require.True(t, phase.IsTerminal())
	require.False(t, restarting)
	_, err = st.RequestRestart(ctx, key, "")
	require.NoError(t, err)
	_, restarting, _, err = st.RunEventsAfter(ctx, key, 0, 100)
	require.NoError(t, err)
	require.True(t, restarting)
}

// InTx inside a transaction is a savepoint whose events join the outer
// transaction's, inserted at its commit; a savepoint that fails drops its
// own.
func TestNestedInTxKeepsOrDropsItsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	key := newRun(t, st, "r", twoSteps())
	before := events(t, db, key)
	err := st.InTx(ctx, func(tx *store.Store) error {
		if _, err := tx.RequestSuspend(ctx, key); err != nil {
			return err
		}
		require.Error(t, tx.InTx(ctx, func(inner *store.Store) error {
			if _, err := inner.RequestResume(ctx, key); err != nil {
				return err
			}
			return errors.New("changed my mind")
		}))
		return nil
	})
	require.NoError(t, err)
	after := events(t, db, key)
	require.Len(t, after, len(before)+1, "the suspend's event only: %v", after)
	run, err := st.GetRun(ctx, key)
	require.NoError(t, err)
	require.NotNil(t, run.Run.SuspendRequestedAt)
	require.Nil(t, run.Run.ResumeRequestedAt, "the failed savepoint rolled back")
}

// A transaction that inserted events of a run holds that run's feed lock
// to its commit, so that a run's ids commit in order: a second writer of the
// same run waits for it; a writer of another run does not.
func TestFeedLockOrdersCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	key := newRun(t, st, "r", twoSteps())
	sibling := newRun(t, st, "r2", twoSteps())

	held, release := make(chan struct{}), make(chan struct{})
	first := make(chan error)
	go func() {
		_, err := st.RequestSuspend(store.WithHold(ctx, func() { close(held); <-release }), key)
		first <- err
	}()
	<-held
	_, err := st.RequestSuspend(ctx, sibling)
	require.NoError(t, err, "another run of the project does not wait")
	// The same run's next writer: an event written outside a run lock.
	second := make(chan error)
	go func() {
		second <- st.InTx(ctx, func(tx *store.Store) error { return tx.WriteActionAborted(ctx, key.Action("a"), "ABORTED", 0) })
	}()
	waiting := func() bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n))
		return n == 1
	}
	require.Eventually(t, waiting, 10*time.Second, 5*time.Millisecond, "the run's second writer waits for its feed lock")
	close(release)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	rows, err := st.EventsAfter(ctx, store.EventFilter{Project: key.Project, Domain: key.Domain, Run: key.Run}, 0, 100)
	require.NoError(t, err)
	n := len(rows)
	require.Equal(t, []string{"run.suspend_requested", "action.aborted"}, []string{rows[n-2].Type, rows[n-1].Type})
}
