package e2e

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/archive"
	capdomain "github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

// TestDeleteRun deletes runs over the API: a live run and a child run of a
// live parent are refused with 409 not_terminal and stay whole; an ended
// parent goes with its child and every row of theirs (404 after, no row
// left in any table); an unknown run is 404.
func TestDeleteRun(t *testing.T) {
	s := Start(t, bins, Options{})
	ctx := context.Background()
	db := openDB(t, s)
	del := func(name string) *api.DeleteRunResponse {
		resp, err := s.Client.DeleteRunWithResponse(ctx, project, domain, name)
		require.NoError(t, err)
		return resp
	}
	// rows counts the runs' rows: those of runs, actions, tasks and
	// attempts (with attempts whose task is gone), and their events.
	rows := func(names ...string) (owned, events int) {
		require.NoError(t, db.QueryRow(`SELECT (SELECT count(*) FROM runs WHERE name = ANY($1))
			+ (SELECT count(*) FROM actions WHERE run_name = ANY($1)) + (SELECT count(*) FROM tasks WHERE run_name = ANY($1))
			+ (SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.run_name = ANY($1))
			+ (SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = a.task_id)),
			(SELECT count(*) FROM run_events WHERE run_name = ANY($1))`, names).Scan(&owned, &events))
		return owned, events
	}

	pushTemplate(t, s, "gated", api.WorkflowSpec{Steps: []api.Step{
		{Name: "wait", Command: ptr(`while [ ! -e "$CAPSTAN_RUN_DIR/open" ]; do sleep 0.05; done`)}}})
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{workflowStep("child", "gated")}})
	kid := name + "-child-0"
	s.Eventually(60*time.Second, "the child running", func() bool {
		resp, err := s.Client.GetRunWithResponse(ctx, project, domain, kid)
		require.NoError(t, err)
		return resp.JSON200 != nil && resp.JSON200.Phase == api.PhaseRUNNING
	})
	owned, events := rows(name, kid)

	for _, run := range []string{name, kid} {
		resp := del(run)
		require.Equal(t, http.StatusConflict, resp.StatusCode(), "%s: %s", run, resp.Body)
		require.Equal(t, "not_terminal", resp.ApplicationproblemJSON409.Code)
		require.Contains(t, *resp.ApplicationproblemJSON409.Detail, "is RUNNING")
	}
	nowOwned, nowEvents := rows(name, kid)
	require.Equal(t, owned, nowOwned, "a refused delete changes nothing")
	require.GreaterOrEqual(t, nowEvents, events, "a refused delete deletes no event (the live runs add theirs)")

	touch(t, s, kid, "open")
	waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
	resp := del(name)
	require.NotNil(t, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body)
	require.Equal(t, []string{name, kid}, resp.JSON200.Deleted)
	owned, events = rows(name, kid)
	require.Zero(t, owned+events, "no row of either run left")
	for _, run := range []string{name, kid} {
		got, err := s.Client.GetRunWithResponse(ctx, project, domain, run)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, got.StatusCode(), run)
	}
	require.Equal(t, http.StatusNotFound, del(name).StatusCode(), "gone")
	require.Equal(t, http.StatusNotFound, del("no-such-run").StatusCode())
}

// TestArchiveDeletedRun deletes, with the api's archive on (a file://
// bucket), an ended run whose step failed once and succeeded on its retry,
// with its child run: each is written to the archive first, and GET
// archived-runs answers each as GET run did before the delete, as does
// `capstan run get --archived` as `run get` did; the document holds the
// failed attempt with its exit code, cause and logs.
func TestArchiveDeletedRun(t *testing.T) {
	dir := t.TempDir()
	s := Start(t, bins, Options{Executors: 1, ServiceEnv: func(name string) []string {
		if name == "api" {
			return []string{"CAPSTAN_ARCHIVE_URL=file://" + dir}
		}
		return nil
	}})
	ctx := context.Background()
	bin := buildCLI(t)
	pushTemplate(t, s, "leaf", api.WorkflowSpec{Steps: []api.Step{{Name: "hi", Command: ptr("echo hi from the child")}}})
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{
		{Name: "flaky", MaxRetriesFailure: ptr(1), Command: ptr(`echo "try $CAPSTAN_ATTEMPT"
if [ ! -e "$CAPSTAN_RUN_DIR/tried" ]; then touch "$CAPSTAN_RUN_DIR/tried"; echo "first try fails" >&2; exit 3; fi`)},
		workflowStep("child", "leaf")}})
	kid := name + "-child-0"
	waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
	live := map[string][]byte{}
	for _, run := range []string{name, kid} {
		resp, err := s.Client.GetRunWithResponse(ctx, project, domain, run)
		require.NoError(t, err)
		require.NotNil(t, resp.JSON200, "%s: %d %s", run, resp.StatusCode(), resp.Body)
		live[run] = resp.Body
	}
	shown := runCLI(t, s, bin, "run", "get", name)
	require.Zero(t, shown.code, shown.stderr)

	resp, err := s.Client.DeleteRunWithResponse(ctx, project, domain, name)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body)
	require.Equal(t, []string{name, kid}, resp.JSON200.Deleted)
	objects, err := filepath.Glob(filepath.Join(dir, project, domain, "*", "*", "*", "*.json.gz"))
	require.NoError(t, err)
	require.Len(t, objects, 2, "one document per run")

	for run, body := range live {
		got, err := s.Client.GetArchivedRunWithResponse(ctx, project, domain, run)
		require.NoError(t, err)
		require.NotNil(t, got.JSON200, "%s: %d %s", run, got.StatusCode(), got.Body)
		require.JSONEq(t, string(body), string(got.Body), "%s as GET run answered it", run)
	}
	archived := runCLI(t, s, bin, "run", "get", "--archived", name)
	require.Zero(t, archived.code, archived.stderr)
	require.Equal(t, shown.stdout, archived.stdout)
	missing := runCLI(t, s, bin, "run", "get", "--archived", "no-such-run")
	require.Equal(t, 3, missing.code, "an API problem")
	require.True(t, strings.HasPrefix(missing.stderr, "capstan: 404 not_found: run e2e/test/no-such-run is not archived"),
		missing.stderr)

	a, err := archive.Open(ctx, "file://"+dir)
	require.NoError(t, err)
	defer a.Close()
	doc, err := a.Get(ctx, capdomain.RunKey{Project: project, Domain: domain, Run: name})
	require.NoError(t, err)
	var flaky archive.Action
	for _, act := range doc.Actions {
		if act.Action.Name == "flaky" {
			flaky = act
		}
	}
	require.Len(t, flaky.Tasks, 1)
	attempts := flaky.Tasks[0].Attempts
	require.Len(t, attempts, 2, "the failed attempt and its retry")
	first := attempts[0]
	require.Equal(t, 3, *first.Attempt.ExitCode)
	require.Equal(t, "user", *first.Attempt.Cause)
	require.Equal(t, "try 1\n", first.Logs.Stdout.Text)
	require.Equal(t, "first try fails\n", first.Logs.Stderr.Text)
	require.Equal(t, "try 2\n", attempts[1].Logs.Stdout.Text)
	require.NotEmpty(t, doc.Events)
}

// deletionEnv leaves the executors' periodic sweep an hour away, so that
// what removes a run directory in these tests is the runs:remove message
// or the sweep at an executor's start.
var deletionEnv = []string{"CAPSTAN_EXECUTOR_SWEEP_INTERVAL=1h"}

// writesRunDir is a step that leaves a file in its run's directory.
var writesRunDir = api.WorkflowSpec{Steps: []api.Step{{Name: "write", Command: ptr(`echo kept > "$CAPSTAN_RUN_DIR/out"`)}}}

// TestDeletionRemovesTheRunDirectory: deleting an ended run removes its
// run directory on the executor that ran it (runs:remove); another run's
// stays.
func TestDeletionRemovesTheRunDirectory(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1, Env: deletionEnv})
	ctx := context.Background()
	name, other := create(t, s, writesRunDir), create(t, s, writesRunDir)
	for _, run := range []string{name, other} {
		waitPhase(t, s, run, 60*time.Second, api.PhaseSUCCEEDED)
		require.FileExists(t, filepath.Join(runDir(s, run), "out"))
	}
	resp, err := s.Client.DeleteRunWithResponse(ctx, project, domain, name)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body)
	require.Equal(t, []string{name}, resp.JSON200.Deleted)
	s.Eventually(15*time.Second, "the deleted run's directory removed", func() bool { return absent(runDir(s, name)) })
	require.FileExists(t, filepath.Join(runDir(s, other), "out"), "another run's directory stays")
}

// TestDeletionSweptAfterAnExecutorCrash: a run deleted while the executor
// that ran it is down (kill -9) leaves its runs:remove on the dead
// worker's queue, which nothing consumes; the executor, started again
// under a new identity, removes the run's directory, and a work directory
// of no live attempt, in the sweep at its start.
func TestDeletionSweptAfterAnExecutorCrash(t *testing.T) {
	// A long grace keeps the killed worker alive to the api meanwhile, so
	// the delete does send it the message.
	s := Start(t, bins, Options{Executors: 1, Env: append([]string{"CAPSTAN_WORKER_GRACE=60s"}, deletionEnv...)})
	ctx := context.Background()
	name := create(t, s, writesRunDir)
	waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
	require.FileExists(t, filepath.Join(runDir(s, name), "out"))
	leftover := filepath.Join(s.DataDir, "attempts", "987654321")
	require.NoError(t, os.MkdirAll(filepath.Join(leftover, ".capstan"), 0o755))
	raw, err := os.ReadFile(filepath.Join(s.dir, "executor-1.id"))
	require.NoError(t, err)
	worker := strings.TrimSpace(string(raw))

	s.Kill("executor-1")
	resp, err := s.Client.DeleteRunWithResponse(ctx, project, domain, name)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body)
	insp := asynq.NewInspector(s.RedisOpt())
	defer insp.Close()
	pending, err := insp.ListPendingTasks(queue.WorkerQueue(worker))
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, queue.TypeRunsRemove, pending[0].Type, "the message waits for the dead executor")
	require.DirExists(t, runDir(s, name), "nothing removed it while the executor was down")

	s.StartExecutor(1)
	s.Eventually(30*time.Second, "the start-up sweep removes the run directory", func() bool {
		return absent(runDir(s, name)) && absent(leftover)
	})
	pending, err = insp.ListPendingTasks(queue.WorkerQueue(worker))
	require.NoError(t, err)
	require.Len(t, pending, 1, "the sweep, not the message, removed it")
}

// absent reports whether path does not exist.
func absent(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}
