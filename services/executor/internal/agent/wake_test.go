package agent_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func (f *fixture) redis(t *testing.T) *redis.Client {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: f.rdb.Addr, DB: f.rdb.DB})
	t.Cleanup(func() { rc.Close() })
	return rc
}

// An attempt pushed onto the wake list alone, with no queued task, starts.
func TestWakeListStartsAnAttempt(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	worker := f.agent.WorkerID()
	fake.addAttempt(shell(21, worker, "true"))
	require.NoError(t, f.redis(t).LPush(context.Background(), queue.WakeKey(queue.WorkerQueue(worker)), strconv.Itoa(21)).Err())
	f.awaitState(t, 21, api.TaskStateSUCCEEDED)
}

// An attempt's second delivery (here its queued task after its wake-up)
// finds it taken: it runs once, and the api is asked about it once.
func TestSecondDeliveryFindsTheAttemptTaken(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	worker := f.agent.WorkerID()
	fake.addAttempt(shell(22, worker, "true"))
	require.NoError(t, f.redis(t).LPush(context.Background(), queue.WakeKey(queue.WorkerQueue(worker)), "22").Err())
	f.awaitState(t, 22, api.TaskStateSUCCEEDED)
	f.enqueue(t, 22)
	f.awaitHandled(t, worker, 22)
	require.Equal(t, 1, fake.reads(22), "one read of the attempt for two deliveries")
	require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateRUNNING, api.TaskStateSUCCEEDED}, fake.states(22))
}
