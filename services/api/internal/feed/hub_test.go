package feed

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
)

// signalled requires w to be signalled within 10 s.
func signalled(t *testing.T, w *Watcher, msg string) {
	t.Helper()
	select {
	case <-w.C:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no signal: "+msg)
	}
}

// quiet requires w to hold no signal.
func quiet(t *testing.T, w *Watcher, msg string) {
	t.Helper()
	select {
	case <-w.C:
		require.FailNow(t, "a signal: "+msg)
	default:
	}
}

// A commit signals the watchers of its run and of its project/domain, not
// the others'; a listener whose connection is lost reconnects and signals
// every watcher; Stop unsubscribes.
func TestHubSignalsWatchersAndReconnects(t *testing.T) {
	t.Parallel()
	url := storetest.NewURL(t)
	st, err := store.Open(context.Background(), url, store.Config{MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	h := New(url, 20*time.Millisecond, 0, slog.New(slog.DiscardHandler))
	run := h.Watch(store.EventFilter{Project: "p", Domain: "d", Run: "r"})
	scope := h.Watch(store.EventFilter{Project: "p", Domain: "d"})
	other := h.Watch(store.EventFilter{Project: "p", Domain: "d", Run: "other"})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- h.Run(ctx) }()
	// The first LISTEN signals everyone: drain it.
	for _, w := range []*Watcher{run, scope, other} {
		signalled(t, w, "the first connection")
	}

	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true"}}}
	spec.Normalize()
	_, _, err = st.Runs().CreateRun(ctx, store.NewRun{Key: domain.RunKey{Project: "p", Domain: "d", Run: "r"}, Spec: spec})
	require.NoError(t, err)
	signalled(t, run, "the run's watcher")
	signalled(t, scope, "the project's watcher")
	quiet(t, other, "another run's watcher")

	_, err = db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, store.ListenerApplicationName)
	require.NoError(t, err)
	signalled(t, other, "a reconnection wakes every watcher")

	h.Stop(run)
	h.Stop(scope)
	h.Stop(other)
	require.Zero(t, h.Watchers())
	cancel()
	require.NoError(t, <-stopped)
}

// listeners counts the listening connections (store.ListenEvents) on db's
// database.
func listeners(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, store.ListenerApplicationName).Scan(&n))
	return n
}

// A hub without watchers holds no LISTEN connection: its first watcher has
// it connect (and is signalled once it listens, then by commits), and the
// connection closes once the last watcher stopped for the linger.
func TestHubListensOnlyWhileWatched(t *testing.T) {
	t.Parallel()
	url := storetest.NewURL(t)
	st, err := store.Open(context.Background(), url, store.Config{MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	h := New(url, 20*time.Millisecond, 50*time.Millisecond, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- h.Run(ctx) }()
	// A listener would connect within the test's first query or two.
	for range 20 {
		require.Zero(t, listeners(t, db), "a listener without a watcher")
	}

	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true"}}}
	spec.Normalize()
	for i, run := range []string{"r1", "r2"} {
		w := h.Watch(store.EventFilter{Project: "p", Domain: "d", Run: run})
		signalled(t, w, "the listener's connection")
		require.Equal(t, 1, listeners(t, db))
		_, _, err = st.Runs().CreateRun(ctx, store.NewRun{Key: domain.RunKey{Project: "p", Domain: "d", Run: run}, Spec: spec})
		require.NoError(t, err)
		signalled(t, w, "a commit of the watched run")
		h.Stop(w)
		require.Eventually(t, func() bool { return listeners(t, db) == 0 }, 10*time.Second, 5*time.Millisecond,
			"the listener outlived its watchers (round %d)", i)
	}
	cancel()
	require.NoError(t, <-stopped)
}

// A notification on the attempts' channel signals the watchers of that
// attempt alone.
func TestHubSignalsAttemptWatchers(t *testing.T) {
	t.Parallel()
	url := storetest.NewURL(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	h := New(url, 20*time.Millisecond, 0, slog.New(slog.DiscardHandler))
	mine, other := h.WatchAttempt(42), h.WatchAttempt(43)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- h.Run(ctx) }()
	signalled(t, mine, "the first connection")
	signalled(t, other, "the first connection")

	_, err = db.Exec(`SELECT pg_notify($1, '42')`, store.AttemptLogsChannel)
	require.NoError(t, err)
	signalled(t, mine, "the attempt's watcher")
	quiet(t, other, "another attempt's watcher")
	h.Stop(mine)
	h.Stop(other)
	cancel()
	require.NoError(t, <-stopped)
}
