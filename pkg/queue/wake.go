package queue

import (
	"context"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// WakeKey is the Redis list a queue's consumers block on to hear of new
// tasks at once: "capstan:wake:<queue>". Its items are Wakeups in JSON.
func WakeKey(queue string) string { return "capstan:wake:" + queue }

// WakeTTL is how long a wake list outlives its last push: the lists of
// executors that went away expire by themselves.
const WakeTTL = time.Minute

// announced reports whether tasks of queue are announced on its wake list:
// those of the scheduler and of the executors, whose consumers read theirs
// (WakeConsumer).
func announced(queue string) bool {
	return queue == Scheduler || strings.HasPrefix(queue, WorkerQueue(""))
}

// announce puts a Wakeup of the task just enqueued (info) on its queue's
// wake list when the Enqueuer has a Wake client, the queue is announced and
// the task is due now. It renews the list's expiry in the same round trip.
// A failure is logged at debug: the queued task is the durable path.
func (e *Enqueuer) announce(ctx context.Context, info *asynq.TaskInfo) {
	if e.Wake == nil || info == nil || info.State != asynq.TaskStatePending || !announced(info.Queue) {
		return
	}
	key := WakeKey(info.Queue)
	item := mustJSON(Wakeup{ID: info.ID, Type: info.Type, Payload: info.Payload, Headers: info.Headers})
	_, err := e.Wake.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, key, item)
		p.PExpire(ctx, key, WakeTTL)
		return nil
	})
	if err != nil {
		e.log.Debug("wake push failed; the queued task delivers it", "key", key, "err", err)
	}
}
