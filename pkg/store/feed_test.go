package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/jackc/pgx/v5"
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
					_, _, _ = st.Runs().RequestSuspend(ctx, key)
				} else {
					_, _, _ = st.Runs().RequestResume(ctx, key)
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
		rows, err := st.Events().EventsAfter(ctx, f, last, 7)
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
	all, err := st.Events().EventsAfter(ctx, f, 0, 1000)
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
	rows, err := st.Events().EventsAfter(ctx, store.EventFilter{Project: a.Project, Domain: a.Domain, Run: a.Run}, 0, 100)
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	for _, r := range rows {
		require.Equal(t, "a", r.RunName)
	}
	all, err := st.Events().EventsAfter(ctx, store.EventFilter{Project: a.Project, Domain: a.Domain}, 0, 100)
	require.NoError(t, err)
	require.Greater(t, len(all), len(rows))

	phase, err := st.Runs().RunPhase(ctx, a)
	require.NoError(t, err)
	require.False(t, phase.IsTerminal())
	_, err = st.Runs().RunPhase(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "nope"})
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
	_, _, err := st.Runs().RequestSuspend(ctx, key)
	require.NoError(t, err)
	want, err := st.Events().EventsAfter(ctx, store.EventFilter{Project: key.Project, Domain: key.Domain, Run: key.Run}, 0, 100)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(want), 2)
	phase, _, got, err := st.Events().RunEventsAfter(ctx, key, want[0].ID, 100)
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
	_, _, _, err = st.Events().RunEventsAfter(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "nope"}, 0, 10)
	require.ErrorIs(t, err, store.ErrNotFound)

	// An ended run whose restart is pending says so: it will run again.
	_, err = db.ExecContext(ctx, `UPDATE runs SET phase = 'FAILED', ended_at = now() WHERE name = $1`, key.Run)
	require.NoError(t, err)
	phase, restarting, _, err := st.Events().RunEventsAfter(ctx, key, 0, 100)
	require.NoError(t, err)
	require.True(t, phase.IsTerminal())
	require.False(t, restarting)
	_, err = st.Runs().RequestRestart(ctx, key, "")
	require.NoError(t, err)
	_, restarting, _, err = st.Events().RunEventsAfter(ctx, key, 0, 100)
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
		if _, _, err := tx.Runs().RequestSuspend(ctx, key); err != nil {
			return err
		}
		require.Error(t, tx.InTx(ctx, func(inner *store.Store) error {
			if _, _, err := inner.Runs().RequestResume(ctx, key); err != nil {
				return err
			}
			return errors.New("changed my mind")
		}))
		return nil
	})
	require.NoError(t, err)
	after := events(t, db, key)
	require.Len(t, after, len(before)+1, "the suspend's event only: %v", after)
	run, err := st.Runs().GetRun(ctx, key)
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
		_, _, err := st.Runs().RequestSuspend(store.WithHold(ctx, func() { close(held); <-release }), key)
		first <- err
	}()
	<-held
	_, _, err := st.Runs().RequestSuspend(ctx, sibling)
	require.NoError(t, err, "another run of the project does not wait")
	// The same run's next writer: an event written outside a run lock.
	second := make(chan error)
	go func() {
		second <- st.InTx(ctx, func(tx *store.Store) error {
			return tx.Actions().WriteActionAborted(ctx, key.Action("a"), "ABORTED", 0)
		})
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
	rows, err := st.Events().EventsAfter(ctx, store.EventFilter{Project: key.Project, Domain: key.Domain, Run: key.Run}, 0, 100)
	require.NoError(t, err)
	n := len(rows)
	require.Equal(t, []string{"run.suspend_requested", "action.aborted"}, []string{rows[n-2].Type, rows[n-1].Type})
}

// listenRaw opens a connection to url that LISTENs on the feed's channel
// without registering (as ListenEvents does), to see what writers send.
func listenRaw(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(context.Background(), "LISTEN "+pgx.Identifier{store.EventsChannel}.Sanitize())
	require.NoError(t, err)
	return conn
}

// nextNotice waits at most 10 s for conn's next notification.
func nextNotice(t *testing.T, conn *pgx.Conn) store.EventNotice {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	require.NoError(t, err, "no notification")
	var en store.EventNotice
	require.NoError(t, json.Unmarshal([]byte(n.Payload), &en))
	return en
}

// Writers notify only while a listener is registered: a run created
// before ListenEvents registered sends nothing (a connection that LISTENs
// unregistered gets the next run's notice first), and the registration is
// removed when ListenEvents returns.
func TestWritersNotifyOnlyWhileAListenerIsRegistered(t *testing.T) {
	t.Parallel()
	url := storetest.NewURL(t)
	st, err := store.Open(context.Background(), url, store.Config{MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	raw := listenRaw(t, url)
	newRun(t, st, "unheard", twoSteps())

	ctx, cancel := context.WithCancel(context.Background())
	connected := make(chan struct{}, 1)
	stopped := make(chan error)
	go func() {
		stopped <- store.ListenEvents(ctx, url, time.Second, func() { connected <- struct{}{} },
			func(error) {}, func(store.EventNotice) {})
	}()
	<-connected
	heard := newRun(t, st, "heard", twoSteps())
	require.Equal(t, store.EventNotice{Project: heard.Project, Domain: heard.Domain, Run: heard.Run}, nextNotice(t, raw))
	cancel()
	require.ErrorIs(t, <-stopped, context.Canceled)

	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM event_listeners`).Scan(&n))
	require.Zero(t, n, "the registration outlived its listener")
}

// A registration waits until every writer that checked for listeners
// without it has committed, so that the re-read its connected callback
// starts finds their rows: ListenEvents reports connected only after a
// writer held between its events' insert and its commit was let go.
func TestListenerRegistersAfterInFlightWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.NewURL(t)
	st, err := store.Open(ctx, url, store.Config{MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	key := newRun(t, st, "r", twoSteps())

	held, release := make(chan struct{}), make(chan struct{})
	writer := make(chan error)
	go func() {
		_, _, err := st.Runs().RequestSuspend(store.WithHold(ctx, func() { close(held); <-release }), key)
		writer <- err
	}()
	<-held
	lctx, cancel := context.WithCancel(ctx)
	connected := make(chan struct{}, 1)
	stopped := make(chan error)
	go func() {
		stopped <- store.ListenEvents(lctx, url, time.Second, func() { connected <- struct{}{} },
			func(error) {}, func(store.EventNotice) {})
	}()
	waiting := func() bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock'`,
			store.ListenerApplicationName).Scan(&n))
		return n == 1
	}
	require.Eventually(t, waiting, 10*time.Second, 5*time.Millisecond, "the registration waits for the writer")
	select {
	case <-connected:
		t.Fatal("connected while a writer that did not notify was still uncommitted")
	default:
	}
	close(release)
	require.NoError(t, <-writer)
	select {
	case <-connected:
	case <-time.After(10 * time.Second):
		t.Fatal("not connected after the writer committed")
	}
	cancel()
	require.ErrorIs(t, <-stopped, context.Canceled)
}

// A writer that checks for listeners while a registration holds the
// table's lock waits for the registration's commit and then notifies:
// Postgres takes a read-committed statement's snapshot after its locks,
// for a statement the connection has prepared before as well.
func TestWriterWaitingOnARegistrationNotifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.NewURL(t)
	st, err := store.Open(ctx, url, store.Config{MaxOpenConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	newRun(t, st, "first", twoSteps()) // the create's statement, prepared on the store's one connection
	raw := listenRaw(t, url)

	reg, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close(ctx) })
	tx, err := reg.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE event_listeners IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO event_listeners (id, expires_at) VALUES (gen_random_uuid(), now() + interval '1 minute')`)
	require.NoError(t, err)
	spec := twoSteps()
	spec.Normalize()
	key := domain.RunKey{Project: "p", Domain: "d", Run: "second"}
	created := make(chan error)
	go func() {
		_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec})
		created <- err
	}()
	var pid int
	require.NoError(t, reg.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	waiting := func() bool {
		var n int
		require.NoError(t, raw.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n))
		return n == 1
	}
	require.Eventually(t, waiting, 10*time.Second, 5*time.Millisecond, "the create waits for the registration")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-created)
	require.Equal(t, store.EventNotice{Project: key.Project, Domain: key.Domain, Run: key.Run}, nextNotice(t, raw))
}

// A listener renews its registration; one that lapsed (deleted here as an
// expired one is by the next registration) is lost and dials again, so
// that its caller re-reads what went without a notification.
func TestLapsedListenerRegistrationReconnects(t *testing.T) {
	restore := store.SetListenerTTL(400 * time.Millisecond)
	defer restore()
	url := storetest.NewURL(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	connected := make(chan struct{}, 4)
	lost := make(chan error, 4)
	stopped := make(chan error)
	go func() {
		stopped <- store.ListenEvents(ctx, url, 10*time.Millisecond, func() { connected <- struct{}{} },
			func(err error) { lost <- err }, func(store.EventNotice) {})
	}()
	defer func() {
		cancel()
		require.ErrorIs(t, <-stopped, context.Canceled)
	}()
	<-connected
	var first time.Time
	require.NoError(t, db.QueryRow(`SELECT expires_at FROM event_listeners`).Scan(&first))
	require.Eventually(t, func() bool {
		var at time.Time
		require.NoError(t, db.QueryRow(`SELECT expires_at FROM event_listeners`).Scan(&at))
		return at.After(first)
	}, 10*time.Second, 5*time.Millisecond, "the registration is renewed")

	_, err = db.Exec(`DELETE FROM event_listeners`)
	require.NoError(t, err)
	select {
	case err := <-lost:
		require.ErrorContains(t, err, "lapsed")
	case <-time.After(10 * time.Second):
		t.Fatal("a lapsed registration went unnoticed")
	}
	select {
	case <-connected:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnection")
	}
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM event_listeners`).Scan(&n))
	require.Equal(t, 1, n, "registered again")
}

// The events' insert on the by-key pool's connection (no sequential scans) reads
// event_listeners by index: a scan costed as disabled had Postgres
// JIT-compile the statement at every call.
func TestEventsInsertReadsListenersByIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openOneConnectionPools(t)
	w := registerWorker(t, st)
	attempts := assignedAttempts(t, st, w, "r", 1)
	_, err := storetest.ReportAttempts(ctx, st, w.ID, []store.BatchedReport{{AttemptID: attempts[0],
		Report: store.Report{State: domain.TaskRunning, Pid: intp(7)}}}, 1<<20)
	require.NoError(t, err)
	plan := explainPrepared(t, store.ByKeyPool(st), "FROM event_listeners", `'[]', '{}', 'c', '{}', 'c', '{}'`)
	require.Contains(t, plan, "event_listeners_expiry")
	require.NotContains(t, plan, "Seq Scan")
	require.NotContains(t, plan, "JIT")
}

// ListenFeed hands each attempt whose output grew, or about which an event
// was written, to its Attempt handler once its transaction committed: an
// append of chunks (in InTx, and outside one), and a report of the attempt;
// a savepoint that failed sends nothing of its appends.
func TestListenFeedNotifiesAttemptsWhoseOutputGrew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.NewURL(t)
	st, err := store.Open(ctx, url, store.Config{MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	first, second := runningAttempt(t, st, "first"), runningAttempt(t, st, "second")

	lctx, cancel := context.WithCancel(ctx)
	connected := make(chan struct{}, 1)
	attempts := make(chan int64, 16)
	stopped := make(chan error)
	go func() {
		stopped <- store.ListenFeed(lctx, url, time.Second, store.FeedHandlers{
			Connected: func() { connected <- struct{}{} }, Lost: func(error) {}, Event: func(store.EventNotice) {},
			Attempt: func(id int64) { attempts <- id }})
	}()
	<-connected
	next := func(what string) int64 {
		t.Helper()
		select {
		case id := <-attempts:
			return id
		case <-time.After(10 * time.Second):
			require.FailNow(t, "no attempt notice: "+what)
			return 0
		}
	}

	appendBounded(t, st, first.ID, 1<<20, out("one\n"))
	require.Equal(t, first.ID, next("an append in InTx"))
	_, err = st.Logs().AppendLogChunks(ctx, second.ID, []store.NewLogChunk{out("two\n")})
	require.NoError(t, err)
	require.Equal(t, second.ID, next("an append outside a transaction"))

	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		require.Error(t, tx.InTx(ctx, func(inner *store.Store) error {
			_, err := inner.Logs().AppendLogChunks(ctx, first.ID, []store.NewLogChunk{out("dropped\n")})
			require.NoError(t, err)
			return errors.New("the savepoint fails")
		}))
		_, err := tx.Logs().AppendLogChunks(ctx, second.ID, []store.NewLogChunk{out("kept\n")})
		return err
	}))
	require.Equal(t, second.ID, next("the append that committed, alone"))

	_, err = storetest.ReportAttempts(ctx, st, *first.WorkerID, []store.BatchedReport{{AttemptID: first.ID,
		Report: store.Report{State: domain.TaskRunning, Pid: intp(7)}}}, 1<<20)
	require.NoError(t, err)
	require.Equal(t, first.ID, next("a report of the attempt"))
	select {
	case id := <-attempts:
		require.FailNow(t, "an extra notice", "attempt %d", id)
	default:
	}
	cancel()
	require.ErrorIs(t, <-stopped, context.Canceled)
}
