package archive_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/archive"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// openBucket opens a file:// archive in a new directory, which it returns.
func openBucket(t *testing.T) (*archive.Archive, string) {
	t.Helper()
	dir := t.TempDir()
	a, err := archive.Open(context.Background(), "file://"+dir)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	return a, dir
}

// secret is the secret_env value of finishedRun's step, which no document
// may hold.
const secret = "s3cret-value"

// finishedRun makes, through the store's statements, an ended run of one
// step "work" of three replicas, each writing the output "answer": task 0
// fails once (exit 1, a user failure, its final report's logs) and
// succeeds on its retry with 100 KiB of stdout shipped as chunks; tasks 1
// and 2 succeed at once. It returns the run's key and the stdout of task
// 0's second attempt.
func finishedRun(t *testing.T, st *store.Store, db *sql.DB, name string) (domain.RunKey, string) {
	t.Helper()
	ctx := context.Background()
	replicas := 3
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "work", Command: "work", Replicas: &replicas,
		Outputs: []string{"answer"}, SecretEnv: map[string]string{"TOKEN": secret}}}}
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	key := domain.RunKey{Project: "p", Domain: "d", Run: name}
	_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec})
	require.NoError(t, err)
	storetest.StartSteps(t, st, key)
	w, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	require.NoError(t, err)
	tasks := storetest.AllTasks(t, st, key.Action("work"))
	require.Len(t, tasks, 3)

	one, zero := 1, 0
	first := attempt(t, st, w.ID, tasks[0].Task.ID, store.Report{State: domain.TaskFailed, ExitCode: &one,
		Cause: "user", Error: "exit status 1", Stdout: "first try\n", Stderr: "boom\n"})
	outcome(t, st, first, store.TaskOutcome{Budget: domain.Budget{FailureCount: 1}, Requeue: true,
		NotBefore: time.Now().UTC(), Result: "retried"})
	stdout := strings.Repeat("0123456789abcdef", 100<<10/16)
	second := attempt(t, st, w.ID, tasks[0].Task.ID, store.Report{State: domain.TaskSucceeded, ExitCode: &zero,
		Outputs: map[string]string{"answer": "a0"}}, store.NewLogChunk{Stream: "stdout", Data: stdout[:60<<10]},
		store.NewLogChunk{Stream: "stderr", Data: "warn\n"}, store.NewLogChunk{Stream: "stdout", Data: stdout[60<<10:]})
	outcome(t, st, second, store.TaskOutcome{Budget: domain.Budget{FailureCount: 1}, State: domain.TaskSucceeded,
		Result: "succeeded"})
	for i, td := range tasks[1:] {
		a := attempt(t, st, w.ID, td.Task.ID, store.Report{State: domain.TaskSucceeded, ExitCode: &zero,
			Outputs: map[string]string{"answer": fmt.Sprintf("a%d", i+1)}})
		outcome(t, st, a, store.TaskOutcome{State: domain.TaskSucceeded, Result: "succeeded"})
	}
	end(t, db, name, "2025-03-04 23:59:00+00")
	return key, stdout
}

// end sets the run's actions and the run SUCCEEDED, ended at (a
// timestamptz literal).
func end(t *testing.T, db *sql.DB, name, at string) {
	t.Helper()
	_, err := db.Exec(`UPDATE actions SET phase = 'SUCCEEDED', ended_at = $2 WHERE run_name = $1`, name, at)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE runs SET phase = 'SUCCEEDED', ended_at = $2 WHERE name = $1`, name, at)
	require.NoError(t, err)
}

// attempt assigns the task to the worker, ships chunks of its output while
// it runs, and reports rep; it returns the attempt's id.
func attempt(t *testing.T, st *store.Store, worker string, task int64, rep store.Report, chunks ...store.NewLogChunk) int64 {
	t.Helper()
	ctx := context.Background()
	a, ok, err := storetest.AssignTask(ctx, st, task, worker)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: domain.TaskRunning})
	require.NoError(t, err)
	if len(chunks) > 0 {
		require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
			return tx.Logs().AppendLogsBounded(ctx, a.ID, chunks, 1<<20)
		}))
	}
	_, err = storetest.ReportAttempt(ctx, st, a.ID, rep)
	require.NoError(t, err)
	return a.ID
}

// outcome writes o on the task of finished attempt id, as the scheduler
// would once it decided it.
func outcome(t *testing.T, st *store.Store, id int64, o store.TaskOutcome) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		now := time.Now().UTC()
		claimed, err := tx.Attempts().LockAndClaimAttempts(ctx, []int64{id}, now)
		if err != nil {
			return err
		}
		require.Len(t, claimed, 1)
		return tx.Tasks().UpdateTaskOutcome(ctx, claimed[0].Task, claimed[0].Attempt, o, now)
	}))
}

// masked is d as a document holds it: secret_env values masked.
func masked(d store.RunDetail) store.RunDetail {
	d.Run.Spec = d.Run.Spec.Masked()
	for i := range d.Actions {
		d.Actions[i].Action.Spec = d.Actions[i].Action.Spec.Masked()
	}
	return d
}

// jsonOf is v's JSON, which compares times by instant.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return string(raw)
}

// Put then Get gives back the run as GET run reads it, every task with
// every attempt (the retried task's failed one with its cause, exit code,
// error and final logs), the run's events and outputs, and the end of each
// attempt's logs, cut to the bound and said so; no secret_env value is
// written.
func TestPutGetRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	key, stdout := finishedRun(t, st, db, "r1")
	a, dir := openBucket(t)

	require.NoError(t, a.Put(ctx, st, key))
	object := filepath.Join(dir, "p", "d", "2025", "03", "04", "r1.json.gz")
	require.Equal(t, "p/d/2025/03/04/r1.json.gz", archive.Key(key, time.Date(2025, 3, 4, 23, 59, 0, 0, time.UTC)))
	raw, err := os.ReadFile(object)
	require.NoError(t, err, "the object is at the run's ended_at day")
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err)
	text, err := io.ReadAll(gz)
	require.NoError(t, err)
	require.NotContains(t, string(text), secret, "secret_env values are masked")

	doc, err := a.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, archive.Version, doc.Version)
	require.Equal(t, archive.DefaultLogTailBytes, doc.LogTailBytes)
	live, err := st.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	require.JSONEq(t, jsonOf(t, masked(live)), jsonOf(t, doc.Detail()), "the run as GET run reads it")
	require.Equal(t, domain.SecretMask, doc.Run.Spec.Steps[0].SecretEnv["TOKEN"])
	outs, err := st.Actions().StepOutputs(ctx, key, nil)
	require.NoError(t, err)
	require.Equal(t, outs, doc.Outputs)
	require.Equal(t, `["a0","a1","a2"]`, doc.Outputs["work"]["answer"])

	require.Len(t, doc.Actions, 2)
	work := doc.Actions[1]
	require.Equal(t, "work", work.Action.Name)
	require.Equal(t, map[string]int{"SUCCEEDED": 3}, work.TaskCounts)
	require.Len(t, work.Tasks, 3)
	retried := work.Tasks[0].Attempts
	require.Len(t, retried, 2)
	failed := retried[0]
	require.Equal(t, domain.TaskFailed, failed.Attempt.State)
	require.Equal(t, "user", *failed.Attempt.Cause)
	require.Equal(t, 1, *failed.Attempt.ExitCode)
	require.Equal(t, "exit status 1", *failed.Attempt.Error)
	require.Equal(t, archive.Logs{Stdout: archive.Stream{Text: "first try\n", Bytes: 10},
		Stderr: archive.Stream{Text: "boom\n", Bytes: 5}}, failed.Logs, "the final report's logs, whole")
	ok := retried[1]
	require.Equal(t, domain.TaskSucceeded, ok.Attempt.State)
	require.Equal(t, archive.Stream{Text: stdout[len(stdout)-archive.DefaultLogTailBytes:], Bytes: int64(len(stdout)),
		Cut: true}, ok.Logs.Stdout, "the shipped stdout's last 64 KiB, cut")
	require.Equal(t, archive.Stream{Text: "warn\n", Bytes: 5}, ok.Logs.Stderr)
	for _, td := range work.Tasks[1:] {
		require.Len(t, td.Attempts, 1)
		require.Equal(t, archive.Logs{}, td.Attempts[0].Logs, "no output")
	}

	var events []string
	rows, err := db.Query(`SELECT type FROM run_events WHERE run_name = 'r1' ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		events = append(events, typ)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, events)
	var got []string
	for _, e := range doc.Events {
		got = append(got, e.Type)
	}
	require.Equal(t, events, got, "every event, in order")
}

// A step of more tasks than a page is archived whole, in page order, each
// task with its attempt.
func TestPutPagesTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	n := store.MaxTaskPageSize*2 + 7
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "big", Plugin: domain.PluginNoop, Replicas: &n}}}
	spec.Normalize()
	key := domain.RunKey{Project: "p", Domain: "d", Run: "big"}
	_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec})
	require.NoError(t, err)
	storetest.StartSteps(t, st, key)
	_, err = db.Exec(`WITH t AS (UPDATE tasks SET state = 4, attempt_count = 1, ended_at = now()
		WHERE run_name = 'big' RETURNING id)
		INSERT INTO attempts (task_id, number, state, exit_code, created_at, updated_at, started_at, finished_at, evaluated_at)
		SELECT id, 1, 4, 0, now(), now(), now(), now(), now() FROM t`)
	require.NoError(t, err)
	end(t, db, "big", "2025-01-02 03:04:05+00")
	a, _ := openBucket(t)

	require.NoError(t, a.Put(ctx, st, key))
	doc, err := a.Get(ctx, key)
	require.NoError(t, err)
	tasks := doc.Actions[1].Tasks
	require.Len(t, tasks, n)
	for i, td := range tasks {
		require.Equal(t, i, td.Task.Idx)
		require.Len(t, td.Attempts, 1)
	}
	require.Len(t, doc.Detail().Actions[1].Tasks, store.RunTasksPerAction, "GET run's first page")
}

// Get finds a run at the newest day it was archived on, among other runs'
// days; it answers ErrNotFound for a run never archived, and for a nil
// (off) archive, which Put leaves alone. Put refuses a run that has not
// ended (writing nothing) and one that does not exist, and writes each run
// of several.
func TestGetWalksDaysNewestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	a, dir := openBucket(t)
	key, _ := finishedRun(t, st, db, "again")
	other, _ := finishedRun(t, st, db, "other")
	end(t, db, "other", "2025-12-31 12:00:00+00")
	for _, at := range []string{"2024-02-03 10:00:00+00", "2025-11-30 10:00:00+00", "2025-06-01 10:00:00+00"} {
		end(t, db, "again", at)
		require.NoError(t, a.Put(ctx, st, key, other))
	}
	doc, err := a.Get(ctx, key)
	require.NoError(t, err)
	require.True(t, time.Date(2025, 11, 30, 10, 0, 0, 0, time.UTC).Equal(*doc.Run.EndedAt), "the newest day: %s", doc.Run.EndedAt)
	doc, err = a.Get(ctx, other)
	require.NoError(t, err)
	require.Equal(t, "other", doc.Run.Name)

	_, err = a.Get(ctx, domain.RunKey{Project: "p", Domain: "d", Run: "never"})
	require.ErrorIs(t, err, archive.ErrNotFound)
	_, err = a.Get(ctx, domain.RunKey{Project: "p", Domain: "nowhere", Run: "again"})
	require.ErrorIs(t, err, archive.ErrNotFound)

	_, err = db.Exec(`UPDATE runs SET phase = 'RUNNING', ended_at = NULL WHERE name = 'other'`)
	require.NoError(t, err)
	before := files(t, dir)
	err = a.Put(ctx, st, other)
	var nt *store.NotTerminalError
	require.ErrorAs(t, err, &nt)
	require.Equal(t, "other", nt.Run)
	require.Equal(t, before, files(t, dir), "nothing written")
	require.ErrorIs(t, a.Put(ctx, st, domain.RunKey{Project: "p", Domain: "d", Run: "nope"}), store.ErrNotFound)

	var off *archive.Archive
	require.NoError(t, off.Put(ctx, st, key))
	_, err = off.Get(ctx, key)
	require.ErrorIs(t, err, archive.ErrNotFound)
	require.NoError(t, off.Close())
}

// files lists the regular files under dir.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	}))
	return out
}

// Open of an empty URL is the archive off; a URL no driver opens is an
// error naming CAPSTAN_ARCHIVE_URL, without the URL's query.
func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := archive.Open(ctx, "")
	require.NoError(t, err)
	require.Nil(t, a)
	for _, url := range []string{"nosuch://bucket?secret=hidden", "file://" + filepath.Join(t.TempDir(), "missing")} {
		_, err := archive.Open(ctx, url)
		require.ErrorContains(t, err, "CAPSTAN_ARCHIVE_URL", url)
		require.NotContains(t, err.Error(), "hidden")
	}
}

// A bucket that cannot be written (a regular file where the project's
// directory must be) fails Put, and leaves no object.
func TestPutFailsOnAnUnwritableBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	key, _ := finishedRun(t, st, db, "r1")
	a, dir := openBucket(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p"), []byte("not a directory"), 0o644))
	require.Error(t, a.Put(ctx, st, key))
	_, err := a.Get(ctx, key)
	require.ErrorIs(t, err, archive.ErrNotFound)
}
