package queue_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Enqueue announces a task due now on the scheduler's or an executor's
// queue on that queue's wake list, which expires by itself; not without a
// Wake client, not a task due later, not a duplicate, not other queues.
func TestEnqueueAnnouncesOnTheWakeList(t *testing.T) {
	opt := redistest.New(t)
	client := asynq.NewClient(opt)
	defer client.Close()
	rc := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: opt.DB})
	defer rc.Close()
	ctx := context.Background()
	key := queue.WakeKey(queue.WorkerQueue("w1"))
	items := func(key string) []string {
		out, err := rc.LRange(ctx, key, 0, -1).Result()
		require.NoError(t, err)
		return out
	}

	enq := queue.NewEnqueuer(client, slog.New(slog.DiscardHandler))
	require.NoError(t, enq.Enqueue(ctx, queue.NewAttemptRunTask("w1", 41, nil)))
	require.Empty(t, items(key), "no wake list without a Wake client")

	enq.Wake = rc
	require.NoError(t, enq.Enqueue(ctx, queue.NewAttemptRunTask("w1", 42, nil)))
	got := items(key)
	require.Len(t, got, 1)
	var w queue.Wakeup
	require.NoError(t, json.Unmarshal([]byte(got[0]), &w))
	require.Equal(t, "attempt:42", w.ID)
	require.Equal(t, queue.TypeAttemptRun, w.Type)
	require.JSONEq(t, `{"attempt_id":42}`, string(w.Payload))
	ttl, err := rc.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0))
	require.LessOrEqual(t, ttl, queue.WakeTTL)

	require.NoError(t, enq.Enqueue(ctx, queue.NewAttemptRunTask("w1", 42, nil)))
	require.Equal(t, int64(1), enq.Duplicates.Load())
	require.NoError(t, enq.Enqueue(ctx, queue.NewAttemptRunTask("w1", 43, nil), asynq.ProcessIn(time.Hour)))
	require.Len(t, items(key), 1, "neither a duplicate nor a task due later is announced")

	require.NoError(t, enq.Enqueue(ctx, queue.NewTaskEvaluateTask(44)))
	require.Len(t, items(queue.WakeKey(queue.Scheduler)), 1)
	require.NoError(t, enq.Enqueue(ctx, queue.NewAttemptKillTask(45, 3)))
	require.Empty(t, items(queue.WakeKey(queue.Abort)), "the abort queue has no wake list")
}
