package agent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/queue"
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
	info, err := f.queue.Enqueue(queue.NewAttemptRunTask(worker, 21), asynq.ProcessIn(time.Hour))
	require.NoError(t, err)
	item, err := json.Marshal(queue.Wakeup{ID: info.ID, Type: info.Type, Payload: info.Payload})
	require.NoError(t, err)
	require.NoError(t, f.redis(t).LPush(context.Background(), queue.WakeKey(queue.WorkerQueue(worker)), item).Err())
	f.awaitState(t, 21, api.TaskStateSUCCEEDED)
	f.awaitHandled(t, worker, 21)
	require.Equal(t, 1, fake.reads(21))
}
