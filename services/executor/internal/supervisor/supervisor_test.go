package supervisor_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { proctest.Main(m) }

const waitFor, tick = 10 * time.Second, 5 * time.Millisecond

// recorder is the control plane as the supervisor sees it: it records every
// report and answers proceed as told.
type recorder struct {
	mu      sync.Mutex
	reports map[int64][]workerapi.AttemptReport
	// answer, when set, decides each report; it may block until ctx ends.
	answer func(ctx context.Context, id int64, rep workerapi.AttemptReport) (bool, error)
}

// Report records reps at once, then waits for their answers.
func (r *recorder) Report(ctx context.Context, id int64, reps ...workerapi.AttemptReport) (bool, error) {
	waits := make([]func() (bool, error), len(reps))
	for i, rep := range reps {
		waits[i] = r.Submit(ctx, id, rep)
	}
	proceed := true
	for _, wait := range waits {
		ok, err := wait()
		if err != nil {
			return ok, err
		}
		proceed = proceed && ok
	}
	return proceed, nil
}

// Submit records rep at once; the answer is decided when waited for.
func (r *recorder) Submit(ctx context.Context, id int64, rep workerapi.AttemptReport) func() (bool, error) {
	r.mu.Lock()
	if r.reports == nil {
		r.reports = map[int64][]workerapi.AttemptReport{}
	}
	r.reports[id] = append(r.reports[id], rep)
	answer := r.answer
	r.mu.Unlock()
	return func() (bool, error) {
		if answer != nil {
			return answer(ctx, id, rep)
		}
		return true, nil
	}
}

func (r *recorder) states(id int64) []api.TaskState {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []api.TaskState
	for _, rep := range r.reports[id] {
		out = append(out, rep.State)
	}
	return out
}

func (r *recorder) find(id int64, st api.TaskState) (workerapi.AttemptReport, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range r.reports[id] {
		if rep.State == st {
			return rep, true
		}
	}
	return workerapi.AttemptReport{}, false
}

// await waits for a report of st about attempt id.
func (r *recorder) await(t *testing.T, id int64, st api.TaskState) workerapi.AttemptReport {
	t.Helper()
	var rep workerapi.AttemptReport
	require.Eventually(t, func() bool {
		var ok bool
		rep, ok = r.find(id, st)
		return ok
	}, waitFor, tick, "no %s report for attempt %d; got %v", st, id, r.states(id))
	return rep
}

func newSupervisor(t *testing.T, rep supervisor.Reporter, cfg supervisor.Config) *supervisor.Supervisor {
	t.Helper()
	cfg.DataDir = cmpOr(cfg.DataDir, t.TempDir())
	s, err := supervisor.New(rep, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, s.Close(ctx))
	})
	return s
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func spec(id int64, command string) workerapi.AttemptSpec {
	return workerapi.AttemptSpec{Id: id, Number: 2, Project: "proj", Domain: "dev", Run: "run-1", Action: "build",
		TaskIndex: 1, Replicas: 3, Plugin: "shell", Command: command, Env: map[string]string{"GREETING": "hello"},
		State: api.TaskStateASSIGNED, Proceed: true}
}

func TestRunReportsEachStateWithEnv(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	data := t.TempDir()
	s := newSupervisor(t, rec, supervisor.Config{DataDir: data})
	cmd := `echo "$GREETING $CAPSTAN_PROJECT/$CAPSTAN_DOMAIN/$CAPSTAN_RUN/$CAPSTAN_ACTION" \
		"task=$CAPSTAN_TASK_INDEX/$CAPSTAN_REPLICAS attempt=$CAPSTAN_ATTEMPT id=$CAPSTAN_ATTEMPT_ID"
		echo "$CAPSTAN_WORK_DIR" "$CAPSTAN_RUN_DIR" "$(pwd)"
		test -d "$CAPSTAN_RUN_DIR" && echo oops >&2`
	require.NoError(t, s.Start(spec(41, cmd)))

	final := rec.await(t, 41, api.TaskStateSUCCEEDED)
	require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateRUNNING, api.TaskStateSUCCEEDED}, rec.states(41))
	running, _ := rec.find(41, api.TaskStateRUNNING)
	require.NotNil(t, running.Pid)
	require.Positive(t, *running.Pid)
	work, run := filepath.Join(data, "attempts", "41"), filepath.Join(data, "runs", "proj", "dev", "run-1")
	require.Equal(t, "hello proj/dev/run-1/build task=1/3 attempt=2 id=41\n"+work+" "+run+" "+work+"\n", *final.Stdout)
	require.Equal(t, "oops\n", *final.Stderr)
	require.Equal(t, 0, *final.ExitCode)
	require.False(t, *final.Truncated)
	require.Nil(t, final.Cause)
	require.NoDirExists(t, work, "the work directory goes with the attempt")
	require.DirExists(t, run, "the run's directory stays for its other tasks")
	require.Eventually(t, func() bool { return !s.Holds(41) }, waitFor, tick)
}

// TestTaskEnvIsAnAllowlist checks that an attempt gets of the executor's
// environment only PATH, HOME, LANG, TZ and the names of PassEnv: neither
// its CAPSTAN_* settings nor anything else (a credential). It sets
// variables, so it does not run in parallel.
func TestTaskEnvIsAnAllowlist(t *testing.T) {
	t.Setenv("CAPSTAN_REDIS_ADDR", "10.0.0.9:6379")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "executor's own")
	t.Setenv("PASSED", "passed")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("TZ", "Europe/Berlin")
	t.Setenv("HOME", "/home/executor")
	rec := &recorder{}
	data := t.TempDir()
	s := newSupervisor(t, rec, supervisor.Config{DataDir: data, PassEnv: []string{"PASSED", "UNSET_HERE"}})
	env := spec(43, `env | grep -v '^CAPSTAN_' | sort; echo "[$CAPSTAN_RUN]"`)
	env.Env = map[string]string{"STEP": "mine", "TZ": "UTC"}
	require.NoError(t, s.Start(env))
	final := rec.await(t, 43, api.TaskStateSUCCEEDED)
	require.Equal(t, "HOME=/home/executor\nLANG=C.UTF-8\nPASSED=passed\nPATH="+os.Getenv("PATH")+"\nPWD="+
		filepath.Join(data, "attempts", "43")+"\nSTEP=mine\nTZ=UTC\n[run-1]\n", *final.Stdout,
		"the step's env wins over the executor's; the shell adds PWD")
	require.Eventually(t, func() bool { return !s.Holds(43) }, waitFor, tick)

	t.Setenv("PATH", "")
	os.Unsetenv("PATH")
	require.NoError(t, s.Start(spec(44, `echo "$PATH"`)))
	final = rec.await(t, 44, api.TaskStateSUCCEEDED)
	require.Equal(t, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n", *final.Stdout,
		"an executor without PATH gives tasks the usual one")
}

func TestNonZeroExitIsUserFailure(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{})
	require.NoError(t, s.Start(spec(1, "echo bad >&2; exit 3")))
	final := rec.await(t, 1, api.TaskStateFAILED)
	require.Equal(t, workerapi.User, *final.Cause)
	require.Equal(t, 3, *final.ExitCode)
	require.Equal(t, "bad\n", *final.Stderr)
	require.Equal(t, "exit status 3", *final.Error)
}

func TestAbortKillsAndReportsKilled(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{})
	require.NoError(t, s.Start(spec(5, "sleep 600")))
	pid := *rec.await(t, 5, api.TaskStateRUNNING).Pid
	require.Equal(t, []supervisor.Held{{ID: 5, State: api.TaskStateRUNNING}}, s.Held())

	killed, err := s.Abort(context.Background(), 5, workerapi.Timeout, "too slow")
	require.NoError(t, err)
	require.True(t, killed)
	require.True(t, proctest.Gone(pid))
	final := rec.await(t, 5, api.TaskStateKILLED)
	require.Equal(t, workerapi.Timeout, *final.Cause)
	require.Equal(t, "too slow", *final.Error)
	require.Eventually(t, func() bool { return !s.Holds(5) }, waitFor, tick)
	_, err = s.Abort(context.Background(), 5, workerapi.Aborted, "")
	require.ErrorIs(t, err, supervisor.ErrNotHeld)
}

func TestAbortWhileBuildingNeverStarts(t *testing.T) {
	t.Parallel()
	for _, dispatched := range []bool{false, true} {
		t.Run(map[bool]string{false: "read", true: "dispatched"}[dispatched], func(t *testing.T) {
			t.Parallel()
			abortWhileBuilding(t, dispatched)
		})
	}
}

// abortWhileBuilding aborts an attempt whose BUILDING answer does not come
// (started from its dispatch when dispatched): it never starts, and its
// final report says KILLED.
func abortWhileBuilding(t *testing.T, dispatched bool) {
	building := make(chan struct{})
	rec := &recorder{answer: func(ctx context.Context, _ int64, rep workerapi.AttemptReport) (bool, error) {
		if rep.State == api.TaskStateBUILDING { // the control plane is unreachable
			close(building)
			<-ctx.Done()
			return false, ctx.Err()
		}
		return true, nil
	}}
	s := newSupervisor(t, rec, supervisor.Config{})
	if dispatched {
		require.NoError(t, s.StartDispatched(context.Background(), spec(5, "touch started")))
	} else {
		require.NoError(t, s.Start(spec(5, "touch started")))
	}
	<-building
	killed, err := s.Abort(context.Background(), 5, workerapi.Aborted, "")
	require.NoError(t, err)
	require.True(t, killed)
	final := rec.await(t, 5, api.TaskStateKILLED)
	require.Equal(t, "killed: aborted", *final.Error)
	require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateKILLED}, rec.states(5))
}

func TestAbortAfterExitAnswersNotKilled(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rec := &recorder{answer: func(_ context.Context, _ int64, rep workerapi.AttemptReport) (bool, error) {
		if rep.State == api.TaskStateSUCCEEDED {
			<-release // the final report is still being delivered
		}
		return true, nil
	}}
	s := newSupervisor(t, rec, supervisor.Config{})
	require.NoError(t, s.Start(spec(5, "true")))
	rec.await(t, 5, api.TaskStateSUCCEEDED)
	require.Equal(t, []supervisor.Held{{ID: 5, State: api.TaskStateSUCCEEDED}}, s.Held())
	killed, err := s.Abort(context.Background(), 5, workerapi.Aborted, "")
	require.NoError(t, err)
	require.False(t, killed)
	close(release)
}

func TestProceedFalseKillsTheProcess(t *testing.T) {
	t.Parallel()
	rec := &recorder{answer: func(_ context.Context, _ int64, rep workerapi.AttemptReport) (bool, error) {
		return rep.State != api.TaskStateRUNNING, nil
	}}
	s := newSupervisor(t, rec, supervisor.Config{})
	require.NoError(t, s.Start(spec(5, "sleep 600")))
	final := rec.await(t, 5, api.TaskStateKILLED)
	require.Equal(t, workerapi.Aborted, *final.Cause)
	running, _ := rec.find(5, api.TaskStateRUNNING)
	require.True(t, proctest.Gone(*running.Pid))
}

func TestSlotsBoundRunningAttempts(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{Slots: 1})
	require.NoError(t, s.Start(spec(1, "sleep 600")))
	require.ErrorIs(t, s.Start(spec(2, "true")), supervisor.ErrFull)
	require.NoError(t, s.Start(spec(1, "sleep 600")), "a re-delivery of a held attempt is a no-op")
	rec.await(t, 1, api.TaskStateRUNNING)

	killed, err := s.Abort(context.Background(), 1, workerapi.Preempted, "")
	require.NoError(t, err)
	require.True(t, killed)
	require.NoError(t, s.Start(spec(2, "true")), "the slot is free once the process is gone")
	rec.await(t, 2, api.TaskStateSUCCEEDED)
	require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateRUNNING, api.TaskStatePREEMPTED}, rec.states(1),
		"a preempted attempt is reported PREEMPTED, which the scheduler retries")
}

func TestCloseReportsWorkerFailed(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s, err := supervisor.New(rec, supervisor.Config{DataDir: t.TempDir(), KillGrace: 200 * time.Millisecond}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.NoError(t, s.Start(spec(1, "sleep 600")))
	require.NoError(t, s.Start(spec(2, "trap '' TERM; sleep 600")))
	pid := *rec.await(t, 2, api.TaskStateRUNNING).Pid

	require.NoError(t, s.Close(context.Background()))
	for _, id := range []int64{1, 2} {
		final, ok := rec.find(id, api.TaskStateWORKERFAILED)
		require.True(t, ok, "attempt %d: %v", id, rec.states(id))
		require.Equal(t, workerapi.WorkerLost, *final.Cause, "retried elsewhere, unlike KILLED")
	}
	require.True(t, proctest.Gone(pid))
	require.ErrorIs(t, s.Start(spec(3, "true")), supervisor.ErrClosed)
	require.Empty(t, s.Held())
}

func TestLogTextIsValidUTF8(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{LogLimit: 5})
	// "é" is two bytes: the last 5 bytes of "xébcde" start inside it.
	require.NoError(t, s.Start(spec(1, `printf 'x\303\251bcde'; printf 'a\000b' >&2`)))
	final := rec.await(t, 1, api.TaskStateSUCCEEDED)
	require.Equal(t, "bcde", *final.Stdout)
	require.Equal(t, "ab", *final.Stderr)
	require.True(t, *final.Truncated)
}

func TestNoopSucceedsWithoutAProcess(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	data := t.TempDir()
	s := newSupervisor(t, rec, supervisor.Config{DataDir: data, Slots: 1})
	noop := spec(7, "")
	noop.Plugin = "noop"
	require.NoError(t, s.Start(noop))

	final := rec.await(t, 7, api.TaskStateSUCCEEDED)
	require.Equal(t, []api.TaskState{api.TaskStateRUNNING, api.TaskStateSUCCEEDED}, rec.states(7))
	running, _ := rec.find(7, api.TaskStateRUNNING)
	require.Nil(t, running.Pid, "no process was started")
	require.Equal(t, 0, *final.ExitCode)
	require.Nil(t, final.Cause)
	_, err := os.Stat(filepath.Join(data, "attempts"))
	require.ErrorIs(t, err, os.ErrNotExist, "no work directory was made")
	require.Eventually(t, func() bool { return s.Start(spec(8, "true")) == nil }, waitFor, tick,
		"the noop attempt's slot is free again")
	rec.await(t, 8, api.TaskStateSUCCEEDED)
}

// A noop attempt has no work to stop: it does not wait for the answer to
// its RUNNING report, and its final report follows at once (in the same
// batch as RUNNING when the executor batches); an answer that it must
// stop, arriving once it ended, changes nothing.
func TestNoopDoesNotWaitForTheRunningAnswer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rec := &recorder{answer: func(ctx context.Context, _ int64, rep workerapi.AttemptReport) (bool, error) {
		if rep.State != api.TaskStateRUNNING {
			return true, nil
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return false, nil
	}}
	s := newSupervisor(t, rec, supervisor.Config{})
	noop := spec(7, "")
	noop.Plugin = "noop"
	require.NoError(t, s.Start(noop))
	rec.await(t, 7, api.TaskStateSUCCEEDED)
	close(release)
	require.Equal(t, []api.TaskState{api.TaskStateRUNNING, api.TaskStateSUCCEEDED}, rec.states(7))
}

// An attempt started from its dispatch, unread (StartDispatched), runs only
// once its BUILDING report's answer says it may: when that answer is lost
// its command never starts and it sends no final report (it is still
// ASSIGNED at the control plane, whose resync dispatches it again), where
// an attempt whose read said it may run goes on; when the answer says it
// must not run, it never starts either.
func TestDispatchedAttemptStartsOnlyOnceConfirmed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rec := &recorder{answer: func(_ context.Context, id int64, rep workerapi.AttemptReport) (bool, error) {
		switch {
		case rep.State != api.TaskStateBUILDING:
			return true, nil
		case id == 8:
			return false, nil // it ended at the control plane meanwhile
		}
		return false, errors.New("report lost") // after ReportTimeout of retries
	}}
	s := newSupervisor(t, rec, supervisor.Config{})
	touch := func(id int64) workerapi.AttemptSpec {
		return spec(id, "touch "+filepath.Join(dir, strconv.FormatInt(id, 10)))
	}
	require.NoError(t, s.StartDispatched(context.Background(), touch(6)))
	require.NoError(t, s.StartDispatched(context.Background(), touch(8)))
	require.NoError(t, s.Start(touch(7)))
	rec.await(t, 7, api.TaskStateSUCCEEDED)
	require.FileExists(t, filepath.Join(dir, "7"), "read, it goes on when the answer is lost")
	rec.await(t, 8, api.TaskStateKILLED)
	require.Eventually(t, func() bool { return !s.Holds(6) && !s.Holds(8) }, waitFor, tick)
	require.Equal(t, []api.TaskState{api.TaskStateBUILDING}, rec.states(6), "no final report")
	require.NoFileExists(t, filepath.Join(dir, "6"))
	require.NoFileExists(t, filepath.Join(dir, "8"))
}
