package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

func intp(v int) *int { return &v }

func newRun(t *testing.T, st *store.Store, name string, spec domain.WorkflowSpec) domain.RunKey {
	t.Helper()
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	key := domain.RunKey{Project: "p", Domain: "d", Run: name}
	_, created, err := st.Runs().CreateRun(context.Background(), store.NewRun{Key: key, Spec: spec})
	require.NoError(t, err)
	require.True(t, created)
	return key
}

// openOneConnectionPools opens a Store of one connection a pool on a fresh
// database, whose URL it returns: the statements prepared on a pool's
// connection are the test's.
func openOneConnectionPools(t *testing.T) (*store.Store, string) {
	t.Helper()
	url := storetest.NewURL(t)
	st, err := store.Open(context.Background(), url, store.Config{MaxOpenConns: 1, ByKeyConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st, url
}

// openWithDB opens a Store on a fresh database, and the same database with
// database/sql, for tests that check rows directly.
func openWithDB(t *testing.T) (*store.Store, *sql.DB) {
	return storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
}

func registerWorker(t *testing.T, st *store.Store) store.Worker {
	t.Helper()
	w, err := st.Workers().RegisterWorker(context.Background(), store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	require.NoError(t, err)
	return w
}

// applyOutcome writes outcome o on the task of finished attempt id with the
// store's statements, as a test's set-up: the decision is the scheduler's
// and is tested there.
func applyOutcome(tb testing.TB, st *store.Store, id int64, o store.TaskOutcome) {
	tb.Helper()
	ctx := context.Background()
	err := st.InTx(ctx, func(tx *store.Store) error {
		now := time.Now().UTC()
		claimed, err := tx.Attempts().LockAndClaimAttempts(ctx, []int64{id}, now)
		if err != nil {
			return err
		}
		if len(claimed) != 1 {
			return fmt.Errorf("attempt %d is not finished, or already evaluated", id)
		}
		return tx.Tasks().UpdateTaskOutcome(ctx, claimed[0].Task, claimed[0].Attempt, o, now)
	})
	require.NoError(tb, err)
}

// tasksOf returns every task of the run's action, current generation
// first, each generation in index order.
func tasksOf(t *testing.T, st *store.Store, key domain.RunKey, action string) []store.TaskDetail {
	t.Helper()
	return storetest.AllTasks(t, st, key.Action(action))
}

func TestAbortKillsTasksAndTracksDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	key := newRun(t, st, "abort", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", Replicas: intp(2)}}})
	storetest.StartSteps(t, st, key)
	tasks := tasksOf(t, st, key, "s")
	a, ok, err := storetest.AssignTask(ctx, st, tasks[0].Task.ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)

	_, err = st.Aborts().AbortAction(ctx, key.Action("a0"), "stop", "")
	require.NoError(t, err)
	_, err = st.Aborts().AbortAction(ctx, key.Action("a0"), "again", "")
	require.ErrorIs(t, err, store.ErrTerminal)
	_, err = st.Aborts().AbortAction(ctx, key.Action("nope"), "x", "")
	require.ErrorIs(t, err, store.ErrNotFound)

	for _, td := range tasksOf(t, st, key, "s") {
		require.Equal(t, domain.TaskKilled, td.Task.State)
	}
	_, ok, err = storetest.AssignTask(ctx, st, tasks[1].Task.ID, w.ID)
	require.NoError(t, err)
	require.False(t, ok, "a killed task is never assigned")

	live, err := st.Aborts().LiveAttemptsUnder(ctx, key.Action("a0"))
	require.NoError(t, err)
	require.Len(t, live, 1)
	require.Equal(t, a.ID, live[0].ID)
	require.Equal(t, w.Address, *live[0].Address)

	res, err := storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)
	require.False(t, res.Proceed, "an aborted attempt must stop")

	n, err := st.Aborts().MarkAbortAttempt(ctx, key.Action("a0"))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = st.Aborts().MarkAbortAttempt(ctx, key.Action("a0"))
	require.NoError(t, err)
	require.Equal(t, 2, n, "the count survives in Postgres")

	evaluate, err := st.Aborts().MarkAttemptsGone(ctx, []int64{a.ID}, "aborted")
	require.NoError(t, err)
	require.Equal(t, []int64{a.ID}, evaluate, "the abort's last attempt is evaluated to finish the abort")
	require.NoError(t, st.Aborts().ClearAbortRequest(ctx, key.Action("a0"), store.AbortDelivered))
	_, err = st.Aborts().MarkAbortAttempt(ctx, key.Action("a0"))
	require.ErrorIs(t, err, store.ErrNotFound, "no abort pending once cleared")
	pending, err := st.Aborts().ListPendingAborts(ctx)
	require.NoError(t, err)
	require.Empty(t, pending)

	d, err := st.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "ABORTED", d.Run.Phase)
	require.Equal(t, store.AbortDelivered, *d.Actions[0].Action.AbortOutcome)
}

func TestStopListAndPlaceableWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	key := newRun(t, st, "stop", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 1"}}})
	storetest.StartSteps(t, st, key)
	a, _, err := storetest.AssignTask(ctx, st, tasksOf(t, st, key, "s")[0].Task.ID, w.ID)
	require.NoError(t, err)

	stop, err := st.Workers().StopList(ctx, w.ID, []int64{a.ID, 999999})
	require.NoError(t, err)
	require.Equal(t, []int64{999999}, stop, "unknown attempts are stopped, current ones kept")

	ws, err := st.Placement().PlaceableWorkers(ctx, time.Minute)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, 1, ws[0].Used)
	ws, err = st.Placement().PlaceableWorkers(ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Empty(t, ws, "a worker silent past the grace gets no work")
}

// TestConcurrentCreatesWithOneIdempotencyKey checks that creates racing
// with the same Idempotency-Key all answer with one run: the losers of the
// unique index get the winner's run, not a conflict.
func TestConcurrentCreatesWithOneIdempotencyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	for round := range 10 {
		names := make([]string, 8)
		created := make([]bool, 8)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				d, c, err := st.Runs().CreateRun(ctx, store.NewRun{Key: domain.RunKey{Project: "p", Domain: "d",
					Run: fmt.Sprintf("r%d-%d", round, i)}, Spec: spec, IdempotencyKey: fmt.Sprintf("key-%d", round)})
				names[i], created[i], errs[i] = d.Run.Name, c, err
			})
		}
		wg.Wait()
		n := 0
		for i := range 8 {
			require.NoError(t, errs[i], "round %d, create %d", round, i)
			require.Equal(t, names[0], names[i], "round %d: one run for one key", round)
			if created[i] {
				n++
			}
		}
		require.Equal(t, 1, n, "round %d: exactly one create inserted", round)
	}
}

// TestCreateRunSendsEachRowOnce checks that a run's create sends each of
// its rows (run, a0, event) once: Postgres parses a JSON argument as many
// times as it is sent.
func TestCreateRunSendsEachRowOnce(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	var sent []string
	require.NoError(t, st.OnStatement(func(_ string, vars []any) {
		for _, v := range vars {
			if s, ok := v.(string); ok && len(s) > 64 {
				sent = append(sent, s)
			}
		}
	}))
	newRun(t, st, "once", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}})
	require.NotEmpty(t, sent, "the create sends its rows as JSON")
	seen := map[string]bool{}
	for _, s := range sent {
		require.False(t, seen[s], "sent twice: %s", s)
		seen[s] = true
	}
	var runs int
	for _, s := range sent {
		if strings.Contains(s, `"steps"`) {
			runs++
		}
	}
	require.Equal(t, 1, runs, "the run row (with its spec) is sent once")
}
