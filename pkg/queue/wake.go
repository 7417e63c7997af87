package queue

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// WakeKey is the Redis list a queue's consumers block on to hear of new
// tasks at once: "capstan:wake:<queue>". The items of a worker queue's list
// are attempt ids in decimal (see Dispatch); those of the Scheduler queue's
// are Wakeups in JSON (see Enqueue and WakeConsumer).
func WakeKey(queue string) string { return "capstan:wake:" + queue }

// WakeTTL is how long a wake list outlives its last push: the lists of
// executors that went away expire by themselves.
const WakeTTL = time.Minute

// Dispatch tells workerID's executor to run attemptID. It enqueues
// attempt:run on the worker's queue, the durable path that survives any
// process's death, then, when the Enqueuer has a Wake client, pushes the id
// onto the worker's wake list (LPUSH and PEXPIRE in one round trip), which
// an idle executor reads with a blocking pop: it starts the attempt at once
// instead of at its queue's next poll. The executor runs an attempt once
// whichever path brings it first. A failed push is logged at debug and is
// not an error: the queued task still delivers the attempt. Errors: those
// of Enqueue.
func (e *Enqueuer) Dispatch(ctx context.Context, workerID string, attemptID int64) error {
	if err := e.Enqueue(ctx, NewAttemptRunTask(workerID, attemptID)); err != nil {
		return err
	}
	if e.Wake == nil {
		return nil
	}
	e.push(ctx, WakeKey(WorkerQueue(workerID)), strconv.FormatInt(attemptID, 10))
	return nil
}

// push puts item on the wake list key and renews the list's expiry, in one
// round trip. A failure is logged at debug: the queued task is the durable
// path.
func (e *Enqueuer) push(ctx context.Context, key, item string) {
	_, err := e.Wake.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, key, item)
		p.PExpire(ctx, key, WakeTTL)
		return nil
	})
	if err != nil {
		e.log.Debug("wake push failed; the queued task delivers it", "key", key, "err", err)
	}
}
