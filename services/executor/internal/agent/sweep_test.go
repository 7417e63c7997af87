package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/stretchr/testify/require"
)

// TestRunsRemoveSparesHeldAndExistingRuns: runs:remove removes the run
// directory of a run the api no longer knows, but not that of a run it
// knows (its name taken again) nor that of a run whose attempt the
// executor runs, until that attempt has ended.
func TestRunsRemoveSparesHeldAndExistingRuns(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	worker := f.agent.WorkerID()
	fake.addAttempt(shell(7, worker, "sleep 600")) // of run proj/dev/run-1
	f.enqueue(t, 7)
	f.awaitState(t, 7, api.TaskStateRUNNING)
	dir := func(run string) string { return filepath.Join(f.data, "runs", "proj", "dev", run) }
	for _, run := range []string{"gone", "kept"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir(run), "sub"), 0o755))
	}
	fake.mu.Lock()
	fake.runs[domain.RunKey{Project: "proj", Domain: "dev", Run: "kept"}] = true
	fake.mu.Unlock()
	enq := queue.NewEnqueuer(f.queue, slog.New(slog.DiscardHandler))
	enq.Wake = f.redis(t)

	require.NoError(t, enq.Enqueue(context.Background(), queue.NewRunsRemoveTask(worker, "proj", "dev",
		[]string{"run-1", "gone", "kept"})))
	require.Eventually(t, func() bool { return noDir(dir("gone")) }, waitFor, tick, "the deleted run's directory")
	require.DirExists(t, dir("kept"), "a run the api knows")
	require.DirExists(t, dir("run-1"), "the run of an attempt the executor runs")

	killed, err := f.sup.Abort(context.Background(), 7, workerapi.Aborted, "test")
	require.NoError(t, err)
	require.True(t, killed)
	require.Eventually(t, func() bool { return !f.sup.Holds(7) }, waitFor, tick)
	require.NoError(t, enq.Enqueue(context.Background(), queue.NewRunsRemoveTask(worker, "proj", "dev", []string{"run-1"})))
	require.Eventually(t, func() bool { return noDir(dir("run-1")) }, waitFor, tick, "once its attempt has ended")
}

// TestSweepRemovesLeftoversAtStartAndThenPeriodically: an executor that
// starts on a data directory with run directories of runs the api does
// not know and a work directory of an attempt that is not live removes
// them (asking about 1,000 runs a request), keeps those of a run that
// exists and of an attempt live on another executor, and sweeps again
// every SweepInterval.
func TestSweepRemovesLeftoversAtStartAndThenPeriodically(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	mkdir := func(parts ...string) string {
		dir := filepath.Join(append([]string{data}, parts...)...)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return dir
	}
	for i := range 1001 {
		mkdir("runs", "proj", "dev", fmt.Sprintf("gone-%d", i))
	}
	kept, leftover, live := mkdir("runs", "proj", "dev", "kept"), mkdir("attempts", "8"), mkdir("attempts", "9")
	fake := newFakeAPI()
	fake.runs[domain.RunKey{Project: "proj", Domain: "dev", Run: "kept"}] = true
	fake.live[9] = true

	runIn(t, fake, agent.Config{SweepInterval: 50 * time.Millisecond}, data)
	require.Eventually(t, func() bool { return noDir(leftover) }, waitFor, tick, "the work directory of an ended attempt")
	entries, err := os.ReadDir(filepath.Join(data, "runs", "proj", "dev"))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "kept", entries[0].Name(), "the directories of the runs the api does not know are gone")
	require.DirExists(t, kept)
	require.DirExists(t, live, "an attempt live elsewhere (a shared data directory)")
	require.Equal(t, []int{1000, 2}, fake.askedRuns()[:2], "1,002 runs in two questions")

	later := mkdir("attempts", "10")
	require.Eventually(t, func() bool { return noDir(later) }, waitFor, tick, "the next sweep")
}

// noDir reports whether dir does not exist.
func noDir(dir string) bool {
	_, err := os.Stat(dir)
	return os.IsNotExist(err)
}
