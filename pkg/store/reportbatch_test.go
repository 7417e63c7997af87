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
	ids := startedTasks(t, st, "deferred", 2)
	attempts := make([]int64, len(ids))
	for i, id := range ids {
		a, ok, err := storetest.AssignTask(ctx, st, id, w.ID)
		require.NoError(t, err)
		require.True(t, ok)
		attempts[i] = a.ID
	}
	exit := 0
	res, err := st.ReportAttempts(ctx, w.ID, []store.BatchedReport{
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
