package store_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// A batch's reports of one attempt in a row leave the rows as if each had
// been written alone: RUNNING (with its pid and start) then SUCCEEDED, with
// RUNNING's columns written by SUCCEEDED's UPDATE; and a RUNNING followed
// by a resent RUNNING, whose deferred columns the batch's end writes.
func TestReportBatchWritesDeferredReports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	w := registerWorker(t, st)
	attempts := assignedAttempts(t, st, w, "deferred", 2)
	exit := 0
	res, err := storetest.ReportAttempts(ctx, st, w.ID, []store.BatchedReport{
		{AttemptID: attempts[0], Report: store.Report{State: domain.TaskRunning, Pid: intp(42)}},
		{AttemptID: attempts[0], Report: store.Report{State: domain.TaskSucceeded, ExitCode: &exit}},
		{AttemptID: attempts[1], Report: store.Report{State: domain.TaskRunning, Pid: intp(43)}},
		{AttemptID: attempts[1], Report: store.Report{State: domain.TaskRunning, Pid: intp(43)}},
	}, 1<<20)
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err, i)
	}
	require.True(t, res[1].Evaluate, "SUCCEEDED asks for an evaluation")
	require.Equal(t, domain.TaskRunning, res[1].Attempt.State, "the attempt as RUNNING left it")

	type row struct {
		attempt, task  int
		pid            sql.NullInt64
		started, ended bool
		exit           sql.NullInt64
	}
	read := func(id int64) row {
		var r row
		require.NoError(t, db.QueryRow(`SELECT at.state, t.state, at.pid, at.started_at IS NOT NULL,
			at.finished_at IS NOT NULL, at.exit_code FROM attempts at JOIN tasks t ON t.id = at.task_id
			WHERE at.id = $1`, id).Scan(&r.attempt, &r.task, &r.pid, &r.started, &r.ended, &r.exit))
		return r
	}
	require.Equal(t, row{attempt: int(domain.TaskSucceeded), task: int(domain.TaskRunning),
		pid: sql.NullInt64{Int64: 42, Valid: true}, started: true, ended: true, exit: sql.NullInt64{Valid: true}},
		read(attempts[0]))
	require.Equal(t, row{attempt: int(domain.TaskRunning), task: int(domain.TaskRunning),
		pid: sql.NullInt64{Int64: 43, Valid: true}, started: true}, read(attempts[1]))

	var types []string
	for _, e := range events(t, db, domain.RunKey{Project: "p", Domain: "d", Run: "deferred"}) {
		if strings.HasPrefix(e, "attempt.") {
			types = append(types, e)
		}
	}
	require.Equal(t, []string{"attempt.RUNNING", "attempt.SUCCEEDED", "attempt.RUNNING"}, types, "the resent RUNNING writes none")
}

// A batch writes its attempts' reports in one statement, each attempt's
// columns as its own reports left them: a failure's error, cause and code,
// a success's outputs, a start's pid, and the tasks of the live reports
// moved.
func TestReportBatchWritesItsAttemptsInOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	w := registerWorker(t, st)
	attempts := assignedAttempts(t, st, w, "onestatement", 3)
	var updates int
	require.NoError(t, store.ByKeyPool(st).OnStatement(func(sql string, _ []any) {
		if strings.Contains(sql, "UPDATE attempts") {
			updates++
		}
	}))
	one, two := 1, 0
	res, err := storetest.ReportAttempts(ctx, st, w.ID, []store.BatchedReport{
		{AttemptID: attempts[0], Report: store.Report{State: domain.TaskRunning, Pid: intp(40)}},
		{AttemptID: attempts[1], Report: store.Report{State: domain.TaskRunning, Pid: intp(41)}},
		{AttemptID: attempts[2], Report: store.Report{State: domain.TaskRunning, Pid: intp(42)}},
		{AttemptID: attempts[0], Report: store.Report{State: domain.TaskFailed, ExitCode: &one, Error: "boom",
			Cause: "user", Code: "Exit"}},
		{AttemptID: attempts[1], Report: store.Report{State: domain.TaskSucceeded, ExitCode: &two,
			Outputs: map[string]string{"n": "7"}}},
	}, 1<<20)
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err, i)
	}
	require.Equal(t, 1, updates, "one UPDATE of attempts for the batch")

	type row struct {
		attempt, task               int
		pid, exit                   sql.NullInt64
		errText, cause, code, outs  sql.NullString
		started, ended, evaluatedAt bool
	}
	read := func(id int64) row {
		var r row
		require.NoError(t, db.QueryRow(`SELECT at.state, t.state, at.pid, at.exit_code, at.error, at.cause, at.code,
			at.outputs::text, at.started_at IS NOT NULL, at.finished_at IS NOT NULL, at.evaluated_at IS NOT NULL
			FROM attempts at JOIN tasks t ON t.id = at.task_id WHERE at.id = $1`, id).Scan(&r.attempt, &r.task,
			&r.pid, &r.exit, &r.errText, &r.cause, &r.code, &r.outs, &r.started, &r.ended, &r.evaluatedAt))
		return r
	}
	str := func(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }
	num := func(n int64) sql.NullInt64 { return sql.NullInt64{Int64: n, Valid: true} }
	running := int(domain.TaskRunning)
	require.Equal(t, row{attempt: int(domain.TaskFailed), task: running, pid: num(40), exit: num(1),
		errText: str("boom"), cause: str("user"), code: str("Exit"), started: true, ended: true}, read(attempts[0]))
	require.Equal(t, row{attempt: int(domain.TaskSucceeded), task: running, pid: num(41), exit: num(0),
		outs: str(`{"n": "7"}`), started: true, ended: true}, read(attempts[1]))
	require.Equal(t, row{attempt: running, task: running, pid: num(42), started: true}, read(attempts[2]))
}

// A batch about several attempts locks them by lists of ids: it runs on
// the by-key pool, which keeps a plan of each statement (made from index
// paths alone). A batch about one attempt runs there too: its write reads
// the attempts from a JSON array, which a main pool's plan expects to
// hold 100 rows and joins to a sequential scan of the attempts.
func TestReportBatchOfSeveralAttemptsRunsByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openOneConnectionPools(t)
	w := registerWorker(t, st)
	attempts := assignedAttempts(t, st, w, "plans", 15)
	running := func(ids ...int64) {
		t.Helper()
		b := make([]store.BatchedReport, len(ids))
		for i, id := range ids {
			b[i] = store.BatchedReport{AttemptID: id, Report: store.Report{State: domain.TaskRunning, Pid: intp(7)}}
		}
		res, err := storetest.ReportAttempts(ctx, st, w.ID, b, 1<<20)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
	}
	for i := range 7 {
		running(attempts[2*i], attempts[2*i+1])
	}
	running(attempts[14])
	_, generic, custom, err := store.ByKeyPool(st).PreparedPlans(ctx, "ORDER BY at.id FOR UPDATE OF at")
	require.NoError(t, err, "the attempts' lock is prepared on the by-key pool's connection")
	require.Equal(t, int64(7), generic)
	require.Zero(t, custom)
	_, _, _, err = st.PreparedPlans(ctx, "ORDER BY at.id FOR UPDATE OF at")
	require.ErrorIs(t, err, sql.ErrNoRows, "not on the main pool's")
	_, generic, _, err = store.ByKeyPool(st).PreparedPlans(ctx, "jsonb_populate_record(a, w.patch)")
	require.NoError(t, err, "the write is prepared on the by-key pool's connection")
	require.Equal(t, int64(8), generic, "seven batches of two attempts, one of one")
	_, _, _, err = st.PreparedPlans(ctx, "jsonb_populate_record(a, w.patch)")
	require.ErrorIs(t, err, sql.ErrNoRows, "a batch of one attempt writes on the by-key pool too")
}

// assignedAttempts starts a run named name of one step of n replicas and
// returns the ids of its tasks' attempts, placed on w.
func assignedAttempts(t *testing.T, st *store.Store, w store.Worker, name string, n int) []int64 {
	t.Helper()
	ids := startedTasks(t, st, name, n)
	attempts := make([]int64, len(ids))
	for i, id := range ids {
		a, ok, err := storetest.AssignTask(context.Background(), st, id, w.ID)
		require.NoError(t, err)
		require.True(t, ok)
		attempts[i] = a.ID
	}
	return attempts
}

// GetAttemptRuns reads several attempts in one statement on the by-key pool,
// in id order, a repeated id once and an unknown one not at all; one id is
// GetAttemptRun's statement on the main pool, which keeps its plan.
func TestGetAttemptRunsReadsEachAttemptOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openOneConnectionPools(t)
	ids := assignedAttempts(t, st, registerWorker(t, st), "r", 3)
	got, err := st.Attempts().GetAttemptRuns(ctx, []int64{ids[2], ids[0], ids[2], -1})
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, want := range []int64{ids[0], ids[2]} {
		require.Equal(t, want, got[i].Attempt.ID)
		require.Equal(t, got[i].Attempt.TaskID, got[i].Task.ID)
		require.Equal(t, got[i].Task.ActionName, got[i].Action.Name)
		require.True(t, got[i].Proceed)
	}
	none, err := st.Attempts().GetAttemptRuns(ctx, []int64{-1})
	require.NoError(t, err)
	require.Empty(t, none)
	for range 6 {
		one, err := st.Attempts().GetAttemptRuns(ctx, ids[1:2])
		require.NoError(t, err)
		require.Len(t, one, 1)
		require.Equal(t, ids[1], one[0].Attempt.ID)
	}
	_, generic, _, err := st.PreparedPlans(ctx, "WHERE at.id = $1")
	require.NoError(t, err)
	require.NotZero(t, generic, "the main pool's kept plan of one attempt")
}

func TestBuildingReportCarriesThePendingReasonUntilTheAttemptRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	w := registerWorker(t, st)
	id := assignedAttempts(t, st, w, "placing", 1)[0]
	reason := func() sql.NullString {
		var r sql.NullString
		require.NoError(t, db.QueryRow(`SELECT t.pending_reason FROM attempts at JOIN tasks t ON t.id = at.task_id
			WHERE at.id = $1`, id).Scan(&r))
		return r
	}
	report := func(rep store.Report) {
		res, err := storetest.ReportAttempts(ctx, st, w.ID, []store.BatchedReport{{AttemptID: id, Report: rep}}, 1<<20)
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.True(t, res[0].Proceed)
	}
	report(store.Report{State: domain.TaskBuilding})
	require.False(t, reason().Valid)
	const msg = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
	report(store.Report{State: domain.TaskBuilding, PendingReason: msg})
	require.Equal(t, msg, reason().String, "a BUILDING report again, with the reason: the task's pending_reason")
	report(store.Report{State: domain.TaskRunning})
	require.False(t, reason().Valid, "a task that runs waits for nothing")
}
