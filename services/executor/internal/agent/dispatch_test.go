package agent_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/stretchr/testify/require"
)

// TestForgedDispatchRunsNothing: a dispatch message whose spec does not
// verify under the worker's dispatch key — unsigned, signed under another
// worker's key or another control-plane key, altered after signing, or a
// good spec of an attempt the message does not name — starts nothing of
// it: no process, no report, no read of its attempts (even one with a good
// spec beside it), though the attempt is ASSIGNED there in the control
// plane. A message signed for the worker runs.
func TestForgedDispatchRunsNothing(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	worker := f.agent.WorkerID()
	dir := t.TempDir()
	forged := func(id int64) workerapi.AttemptSpec {
		return shell(id, worker, "touch "+filepath.Join(dir, "forged"))
	}
	enq := queue.NewEnqueuer(f.queue, slog.New(slog.DiscardHandler))
	enq.Wake = f.redis(t)
	ctx := context.Background()

	altered := sign(t, worker, shell(43, worker, "true"))
	altered.Spec = []byte(strings.Replace(string(altered.Spec), `"command":"true"`,
		`"command":"touch `+filepath.Join(dir, "forged")+`"`, 1))
	otherKey, err := queue.SignSpec(workerkey.New("another-control-plane-key-0123456789abcdef").DispatchKey(worker), forged(44))
	require.NoError(t, err)
	messages := []struct {
		name  string
		ids   []int64
		specs []queue.SignedSpec
	}{
		{"unsigned", []int64{41}, []queue.SignedSpec{{Spec: mustJSON(t, forged(41))}}},
		{"another worker's key", []int64{42}, []queue.SignedSpec{sign(t, "0b4e7a0e-5fe8-4c0e-9f1a-2a3e4b5c6d7e", forged(42))}},
		{"altered", []int64{43}, []queue.SignedSpec{altered}},
		{"another control-plane key", []int64{44}, []queue.SignedSpec{otherKey}},
		{"a good spec beside a forged one", []int64{45, 46},
			[]queue.SignedSpec{sign(t, worker, shell(45, worker, "touch "+filepath.Join(dir, "good"))),
				{Spec: mustJSON(t, forged(46))}}},
		{"a spec of an attempt not named", []int64{47}, []queue.SignedSpec{sign(t, worker, shell(48, worker, "true"))}},
	}
	for i, m := range messages {
		for _, id := range m.ids {
			fake.addAttempt(shell(id, worker, "true")) // ASSIGNED here, as Postgres holds it
		}
		require.NoError(t, enq.Enqueue(ctx, queue.NewAttemptsRunTask(worker, m.ids, m.specs)), m.name)
		require.Eventually(t, func() bool { return strings.Count(f.logs.String(), "dispatch refused") == i+1 },
			waitFor, tick, "%s: refused", m.name)
		for _, id := range append(m.ids, 48) {
			require.False(t, f.sup.Holds(id), "%s: attempt %d", m.name, id)
			require.Empty(t, fake.reportsOf(id), "%s: attempt %d", m.name, id)
			require.Zero(t, fake.reads(id), "%s: attempt %d is not read either", m.name, id)
		}
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no process ran")

	good := shell(49, worker, "touch "+filepath.Join(dir, "good"))
	fake.addAttempt(good)
	require.NoError(t, enq.Enqueue(ctx, queue.NewAttemptsRunTask(worker, []int64{49}, []queue.SignedSpec{sign(t, worker, good)})))
	f.awaitState(t, 49, api.TaskStateSUCCEEDED)
	require.FileExists(t, filepath.Join(dir, "good"))
	require.Zero(t, fake.reads(49), "a verified spec starts unread")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
