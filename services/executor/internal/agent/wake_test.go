package agent_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func (f *fixture) redis(t *testing.T) *redis.Client {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: f.rdb.Addr, DB: f.rdb.DB})
	t.Cleanup(func() { rc.Close() })
	return rc
}

// An attempt:run task the queue's poll cannot take (due in an hour) but
// announced on the wake list is claimed off the queue and started at once.
func TestWakeListStartsAnAttempt(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	worker := f.agent.WorkerID()
	fake.addAttempt(shell(21, worker, "true"))
	info, err := f.queue.Enqueue(queue.NewAttemptRunTask(worker, 21, nil), asynq.ProcessIn(time.Hour))
	require.NoError(t, err)
	item, err := json.Marshal(queue.Wakeup{ID: info.ID, Type: info.Type, Payload: info.Payload})
	require.NoError(t, err)
	require.NoError(t, f.redis(t).LPush(context.Background(), queue.WakeKey(queue.WorkerQueue(worker)), item).Err())
	f.awaitState(t, 21, api.TaskStateSUCCEEDED)
	f.awaitHandled(t, worker, 21)
	require.Equal(t, 1, fake.reads(21))
}

// An attempt whose message carries its spec (as a placement pass sends it)
// starts without reading the attempt from the api on the message's first
// delivery; any later delivery reads it, so an attempt that ran meanwhile
// is not run again: a message put back by the wake list's consumer, and
// one asynq retries after one of its attempts found every slot busy.
func TestStartsFromTheMessagesSpecOnItsFirstDeliveryOnly(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{Slots: 1, FullRetryDelay: 20 * time.Millisecond})
	worker := f.agent.WorkerID()
	ctx := context.Background()
	enq := queue.NewEnqueuer(f.queue, slog.New(slog.DiscardHandler))
	enq.Wake = f.redis(t)

	spec := shell(30, worker, "true")
	fake.addAttempt(spec) // the fake api records reports of attempts it knows
	require.NoError(t, enq.Enqueue(ctx, queue.NewAttemptsRunTask(worker, []int64{30}, []queue.SignedSpec{sign(t, worker, spec)})))
	f.awaitState(t, 30, api.TaskStateSUCCEEDED)
	require.Eventually(t, func() bool { return !f.sup.Holds(30) }, waitFor, tick)
	require.Zero(t, fake.reads(30), "started from the message")

	// The same message again, put back after a failure: read, and dropped
	// (the attempt ended).
	again := queue.NewAttemptsRunTask(worker, []int64{30}, []queue.SignedSpec{sign(t, worker, spec)})
	_, err := f.queue.Enqueue(asynq.NewTaskWithHeaders(again.Type(), again.Payload(), map[string]string{queue.HeaderPutBack: "1"}),
		asynq.Queue(queue.WorkerQueue(worker)), asynq.TaskID("again"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fake.reads(30) == 1 }, waitFor, tick)
	require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateRUNNING, api.TaskStateSUCCEEDED}, fake.states(30),
		"not run again")

	// One slot, held: a message from the queue's poll finds it busy, and
	// its retry reads the attempt.
	poll := queue.NewEnqueuer(f.queue, slog.New(slog.DiscardHandler))
	busy, next := shell(31, worker, "sleep 600"), shell(32, worker, "true")
	fake.addAttempt(busy)
	fake.addAttempt(next)
	require.NoError(t, poll.Enqueue(ctx, queue.NewAttemptsRunTask(worker, []int64{31}, []queue.SignedSpec{sign(t, worker, busy)})))
	require.Eventually(t, func() bool { return f.sup.Holds(31) }, waitFor, tick)
	require.NoError(t, poll.Enqueue(ctx, queue.NewAttemptsRunTask(worker, []int64{32}, []queue.SignedSpec{sign(t, worker, next)})))
	require.Eventually(t, func() bool { return fake.reads(32) > 0 }, waitFor, tick, "the retry reads the attempt")
	require.Zero(t, fake.reads(31))
	killed, err := f.sup.Abort(ctx, 31, workerapi.Preempted, "")
	require.NoError(t, err)
	require.True(t, killed)
	f.awaitState(t, 32, api.TaskStateSUCCEEDED)
}
