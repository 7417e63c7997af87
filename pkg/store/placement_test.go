package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

func TestPendingOrderAndReasons(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	low := newRun(t, st, "low", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Priority: "batch"}}})
	high := newRun(t, st, "high", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Priority: "production",
		Resources:   &domain.Resources{CPUMillis: 500, MemoryBytes: 1 << 30},
		Constraints: []domain.Constraint{{Key: "gpu", Op: domain.OpExists}}}}})
	none, err := st.Placement().PendingWork(ctx, 10, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, none.Tasks)
	require.Empty(t, none.Workers)
	w, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8,
		Labels: map[string]string{"gpu": "a100"}})
	require.NoError(t, err)
	for _, k := range []domain.RunKey{low, high} {
		storetest.StartSteps(t, st, k)
	}
	read, err := st.Placement().PendingWork(ctx, 10, 10, time.Minute)
	require.NoError(t, err)
	pending, workers := read.Tasks, read.Workers
	require.Len(t, pending, 2)
	samePlaceable(t, st, workers)
	require.Equal(t, map[string]string{"gpu": "a100"}, workers[0].Labels)
	require.Equal(t, "high", pending[0].RunName, "the production band is placed first")
	require.Equal(t, int64(500), pending[0].CPUMillis, "resources copied from the step")
	constraints, err := json.Marshal(pending[0].Constraints)
	require.NoError(t, err)
	require.JSONEq(t, `[{"key":"gpu","op":"EXISTS"}]`, string(constraints))

	reason := "no worker matches constraint gpu=EXISTS"
	require.NoError(t, st.Placement().SetPendingReasons(ctx, map[int64]string{pending[0].ID: reason}))
	d, err := st.Actions().GetAction(ctx, high.Action("s"))
	require.NoError(t, err)
	require.Equal(t, reason, *d.Tasks[0].Task.PendingReason)
	require.Equal(t, string(domain.PhaseWaitingForResources), d.Action.Phase, "a known pending_reason shows as WAITING_FOR_RESOURCES")

	_, ok, err := storetest.AssignTask(ctx, st, pending[0].ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	read, err = st.Placement().PendingWork(ctx, 10, 10, time.Minute)
	require.NoError(t, err)
	workers = read.Workers
	samePlaceable(t, st, workers)
	require.Equal(t, 1, workers[0].Used)
	require.Equal(t, int64(500), workers[0].UsedCPUMillis)
	require.Equal(t, int64(1<<30), workers[0].UsedMemoryBytes)
	require.NotNil(t, workers[0].LowestPriority)
	d, err = st.Actions().GetAction(ctx, high.Action("s"))
	require.NoError(t, err)
	require.Nil(t, d.Tasks[0].Task.PendingReason, "placing a task clears its reason")
	require.Equal(t, string(domain.PhaseRunning), d.Action.Phase)
}

// samePlaceable checks that workers, as PendingWork read them in its one
// statement, are what PlaceableWorkers reads: one worker here.
func samePlaceable(t *testing.T, st *store.Store, workers []store.WorkerLoad) {
	t.Helper()
	want, err := st.Placement().PlaceableWorkers(context.Background(), time.Minute)
	require.NoError(t, err)
	require.Len(t, want, 1)
	require.Len(t, workers, 1)
	got := workers[0]
	for _, ts := range [][2]time.Time{{want[0].LastHeartbeatAt, got.LastHeartbeatAt}, {want[0].CreatedAt, got.CreatedAt},
		{want[0].UpdatedAt, got.UpdatedAt}} {
		require.True(t, ts[0].Equal(ts[1]), "%s against %s", ts[1], ts[0])
	}
	got.LastHeartbeatAt, got.CreatedAt, got.UpdatedAt = want[0].LastHeartbeatAt, want[0].CreatedAt, want[0].UpdatedAt
	require.Equal(t, want[0], got)
}

func TestExpiryDueAttemptTimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w := registerWorker(t, st)
	key := newRun(t, st, "slow", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600", AttemptTimeout: "1ms"}}})
	storetest.StartSteps(t, st, key)
	a, _, err := storetest.AssignTask(ctx, st, tasksOf(t, st, key, "s")[0].Task.ID, w.ID)
	require.NoError(t, err)
	due, err := st.Tasks().ExpiryDue(ctx, 100)
	require.NoError(t, err)
	require.Empty(t, due.AttemptTimeouts, "an attempt that has not started cannot time out")
	_, err = storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		due, err = st.Tasks().ExpiryDue(ctx, 100)
		require.NoError(t, err)
		return len(due.AttemptTimeouts) == 1
	}, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, key.Action("s"), due.AttemptTimeouts[0].Action)
	require.Equal(t, time.Millisecond, due.AttemptTimeouts[0].Timeout)
}

// TestWaitingForResourcesWritesAnEvent: a QUEUED action that SetPendingReasons
// moves to WAITING_FOR_RESOURCES writes an "action.phase" row, as every state
// change does: it bumps the row's version and writes a run_events row in the
// same transaction (the audit trail a watcher reads). An action already
// RUNNING or already waiting does not move, and writes none.
func TestWaitingForResourcesWritesAnEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	w := registerWorker(t, st)
	queued := newRun(t, st, "queued", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}})
	busy := newRun(t, st, "busy", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: intp(2)}}})
	storetest.StartSteps(t, st, queued)
	storetest.StartSteps(t, st, busy)
	waiting, bt := tasksOf(t, st, queued, "s")[0].Task, tasksOf(t, st, busy, "s")
	_, ok, err := storetest.AssignTask(ctx, st, bt[0].Task.ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	before, err := st.Actions().GetAction(ctx, queued.Action("s"))
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseQueued), before.Action.Phase)

	reason := "no worker has a free slot"
	require.NoError(t, st.Placement().SetPendingReasons(ctx, map[int64]string{waiting.ID: reason, bt[1].Task.ID: reason}))
	after, err := st.Actions().GetAction(ctx, queued.Action("s"))
	require.NoError(t, err)
	require.Equal(t, string(domain.PhaseWaitingForResources), after.Action.Phase)
	require.Equal(t, before.Action.Version+1, after.Action.Version, "the move bumps the action's version")
	require.Equal(t, []phaseEvent{{From: "QUEUED", To: "WAITING_FOR_RESOURCES", Reason: reason}},
		phaseEvents(t, db, queued.Action("s")), "the move writes its action.phase row")
	require.Equal(t, []phaseEvent{{From: "QUEUED", To: "RUNNING"}}, phaseEvents(t, db, busy.Action("s")),
		"a RUNNING action does not move: only its assignment's row")

	require.NoError(t, st.Placement().SetPendingReasons(ctx, map[int64]string{waiting.ID: reason}))
	require.NoError(t, st.Placement().SetPendingReasons(ctx, map[int64]string{waiting.ID: "no worker matches constraint gpu=EXISTS"}))
	require.Len(t, phaseEvents(t, db, queued.Action("s")), 1, "an action already waiting does not move again")
}

// phaseEvent is the data of an "action.phase" row of run_events.
type phaseEvent struct{ From, To, Reason string }

// phaseEvents reads the "action.phase" rows of action key, oldest first.
func phaseEvents(t *testing.T, db *sql.DB, key domain.ActionKey) []phaseEvent {
	t.Helper()
	rows, err := db.Query(`SELECT data->>'from', data->>'to', coalesce(data->>'reason', '') FROM run_events
		WHERE project = $1 AND domain = $2 AND run_name = $3 AND action_name = $4 AND type = 'action.phase'
		ORDER BY id`, key.Project, key.Domain, key.Run, key.Action)
	require.NoError(t, err)
	defer rows.Close()
	var out []phaseEvent
	for rows.Next() {
		var e phaseEvent
		require.NoError(t, rows.Scan(&e.From, &e.To, &e.Reason))
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}

// SetPendingReasons on the pass's connection (one generic plan a
// statement) reads the tasks by key, not through a partial index of the
// PENDING tasks, which a table filled since its last ANALYZE makes look
// nearly empty: through it, each call matched every PENDING task against
// its list of ids.
func TestSetPendingReasonsReadsTasksByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, url := openOneConnectionPools(t)
	key := newRun(t, st, "r", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: intp(300)}}})
	storetest.StartSteps(t, st, key)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	// 3,000 other PENDING tasks, never analyzed.
	_, err = db.ExecContext(ctx, `INSERT INTO tasks (project, domain, run_name, action_name, idx, state)
		SELECT $1, $2, $3, 's', 1000 + i, $4 FROM generate_series(1, 3000) i`, key.Project, key.Domain, key.Run, domain.TaskPending)
	require.NoError(t, err)
	reasons := map[int64]string{}
	for _, td := range tasksOf(t, st, key, "s") {
		if td.Task.Idx < 1000 { // the step's own
			reasons[td.Task.ID] = "no worker has a free slot"
		}
	}
	for range 2 { // the second call finds every reason written already
		require.NoError(t, store.PassConn(st).Placement().SetPendingReasons(ctx, reasons))
	}
	var written int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE pending_reason IS NOT NULL`).Scan(&written))
	require.Equal(t, 300, written)

	explained := 0
	for _, substr := range []string{"pending_reason IS DISTINCT FROM", `SET "pending_reason"=`, "SET pending_reason = "} {
		types, err := store.PassConn(st).PreparedParams(ctx, substr)
		require.NoError(t, err)
		if len(types) == 0 {
			continue // not this form of the write
		}
		explained++
		args := make([]string, len(types))
		for i, typ := range types {
			args[i] = map[string]string{"bigint[]": "'{1,2}'", "text": "'x'", "timestamp with time zone": "now()"}[typ]
			if args[i] == "" {
				args[i] = "1"
			}
		}
		plan := explainPrepared(t, store.PassConn(st), substr, strings.Join(args, ", "))
		byKey := strings.Contains(plan, "tasks_pkey") && !strings.Contains(plan, "tasks_pending")
		require.True(t, byKey, "%s: %.200s", substr, plan)
	}
	require.Equal(t, 2, explained, "the read and the write")
}
