package queue_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Dispatch queues attempt:run (the durable path) and pushes the id onto the
// worker's wake list, which expires by itself; without a Wake client it
// only queues.
func TestDispatchQueuesAndWakes(t *testing.T) {
	opt := redistest.New(t)
	client := asynq.NewClient(opt)
	defer client.Close()
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	rc := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: opt.DB})
	defer rc.Close()
	ctx := context.Background()

	enq := queue.NewEnqueuer(client, slog.New(slog.DiscardHandler))
	require.NoError(t, enq.Dispatch(ctx, "w1", 41))
	_, err := insp.GetTaskInfo(queue.WorkerQueue("w1"), "attempt:41")
	require.NoError(t, err, "queued")
	n, err := rc.Exists(ctx, queue.WakeKey(queue.WorkerQueue("w1"))).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no wake list without a Wake client")

	enq.Wake = rc
	require.NoError(t, enq.Dispatch(ctx, "w1", 42))
	_, err = insp.GetTaskInfo(queue.WorkerQueue("w1"), "attempt:42")
	require.NoError(t, err, "queued")
	items, err := rc.LRange(ctx, queue.WakeKey(queue.WorkerQueue("w1")), 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"42"}, items)
	ttl, err := rc.PTTL(ctx, queue.WakeKey(queue.WorkerQueue("w1"))).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0))
	require.LessOrEqual(t, ttl, queue.WakeTTL)

	// A queued attempt is not dispatched twice into the queue (TaskID), but
	// every Dispatch wakes: the executor dedupes what it already took.
	require.NoError(t, enq.Dispatch(ctx, "w1", 42))
	require.Equal(t, int64(1), enq.Duplicates.Load())
	items, err = rc.LRange(ctx, queue.WakeKey(queue.WorkerQueue("w1")), 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"42", "42"}, items)
}
