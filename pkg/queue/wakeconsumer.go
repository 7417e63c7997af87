package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Wakeup announces a task just enqueued, on its queue's wake list.
type Wakeup struct {
	ID      string            `json:"id"`
	Type    string            `json:"type"`
	Payload []byte            `json:"payload"`
	Headers map[string]string `json:"headers,omitempty"`
}

// WakeConsumer takes the tasks a queue's wake list announces at once,
// instead of at the queue's next poll. It claims each task by deleting it
// from the queue in one script (claimScript), atomic against the
// consumer's dequeue: a task the poll already took, or that is gone, is
// skipped, so each task is handled by one of the two paths. The claim is
// made by the goroutine that then handles the task, so the pops go on while
// it waits on Redis: the tasks a placement announces together are claimed
// and handled together (an executor's reads of them then share requests),
// not one round trip after the other. A task whose
// handler fails is put back on the queue under its id, due after Retry, so
// that the queue's retries take over (unless the error wraps
// asynq.SkipRetry), marked HeaderPutBack. Replicas may share a wake list:
// each item goes to one.
type WakeConsumer struct {
	// Queue is the queue whose wake list is read (WakeKey(Queue)).
	Queue string
	// Redis holds the wake list and the queue (the consumer opens a client
	// of its own); Enqueuer puts failed tasks back on the queue in the same
	// Redis. A task put back is due later, so the Enqueuer does not
	// announce it.
	Redis    asynq.RedisConnOpt
	Enqueuer *Enqueuer
	// Handler handles the tasks (the consumer's ServeMux).
	Handler asynq.Handler
	// Concurrency bounds the tasks handled at once. Default 10.
	Concurrency int
	// Retry is the delay before a failed task is due again. Default 1s.
	Retry time.Duration
	// MaxRetry is the retries a task put back gets. Default 25.
	MaxRetry int
	Log      *slog.Logger
}

// wakeBlock is how long one blocking pop waits.
const wakeBlock = 5 * time.Second

// Run reads the wake list until ctx ends, and then waits for the tasks it
// is handling.
func (c *WakeConsumer) Run(ctx context.Context) {
	rc, ok := c.Redis.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		c.Log.Error("no redis client for the wake list; the queue's poll alone delivers", "queue", c.Queue)
		return
	}
	defer rc.Close()
	stop := context.AfterFunc(ctx, func() { _ = rc.Close() }) // ends a blocking pop at once
	defer stop()
	// The claims go on another client, which outlives the pops: a task
	// popped as ctx ends is still claimed and handled.
	cc := c.Redis.MakeRedisClient().(redis.UniversalClient)
	defer cc.Close()
	n := c.Concurrency
	if n <= 0 {
		n = 10
	}
	// n long-lived handlers, not a goroutine per task: a handler's stack
	// has grown to what claiming and handling a task takes (queries,
	// JSON), and a new goroutine would grow it again, copy by copy.
	claims := make(chan Wakeup)
	var handlers sync.WaitGroup
	for range n {
		handlers.Go(func() {
			for w := range claims {
				if !c.claim(ctx, cc, w.ID) {
					continue // the queue's poll took it first, or it is gone
				}
				c.handle(context.WithoutCancel(ctx), w)
			}
		})
	}
	defer handlers.Wait()
	defer close(claims)
	for ctx.Err() == nil {
		res, err := rc.BLPop(ctx, wakeBlock, WakeKey(c.Queue)).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			if ctx.Err() == nil {
				c.Log.Debug("wake pop failed; retrying", "queue", c.Queue, "err", err)
				pause(ctx, time.Second)
			}
			continue
		}
		var w Wakeup
		if err := json.Unmarshal([]byte(res[1]), &w); err != nil || w.ID == "" || w.Type == "" {
			c.Log.Warn("malformed wake-up; skipped", "queue", c.Queue, "item", res[1])
			continue
		}
		claims <- w // waits while all n handlers are busy
	}
}

// claimScript deletes the task ARGV[1] from its queue unless the queue's
// consumer has it (active) and returns 1, else 0: what asynq's
// Inspector.DeleteTask does, in one round trip instead of two (DeleteTask
// first checks that the queue exists). KEYS[1] is the task's hash; a
// pending task is in the list ARGV[2].."pending", a scheduled, retried,
// archived or completed one in the sorted set named so after its state, in
// asynq's key layout (taskKey, queuePrefix). TestWakeConsumerClaimsAnnouncedTasks
// holds it to asynq's own client, server and inspector.
var claimScript = redis.NewScript(`
local state = redis.call("HGET", KEYS[1], "state")
if not state or state == "active" or state == "aggregating" then
	return 0
end
local removed
if state == "pending" then
	removed = redis.call("LREM", ARGV[2] .. state, 0, ARGV[1])
else
	removed = redis.call("ZREM", ARGV[2] .. state, ARGV[1])
end
if removed == 0 then
	return 0
end
local unique_key = redis.call("HGET", KEYS[1], "unique_key")
if unique_key and unique_key ~= "" and redis.call("GET", unique_key) == ARGV[1] then
	redis.call("DEL", unique_key)
end
return redis.call("DEL", KEYS[1])
`)

// process runs w's handler. A panic becomes its error, as asynq's own
// server makes it: one task's handler cannot end the process, and the task
// goes back on the queue like any failed one.
func (c *WakeConsumer) process(ctx context.Context, w Wakeup) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler of %s panicked: %v", w.Type, r)
		}
	}()
	return c.Handler.ProcessTask(ctx, asynq.NewTaskWithHeaders(w.Type, w.Payload, w.Headers))
}

// taskKey and queuePrefix are asynq's key of task id's hash and prefix of
// queue's keys.
func taskKey(queue, id string) string { return queuePrefix(queue) + "t:" + id }
func queuePrefix(queue string) string { return "asynq:{" + queue + "}:" }

// claim takes task id off the queue (claimScript) and reports whether it
// did. A failed script leaves the task to the queue's poll.
func (c *WakeConsumer) claim(ctx context.Context, rc redis.Scripter, id string) bool {
	n, err := claimScript.Run(context.WithoutCancel(ctx), rc, []string{taskKey(c.Queue, id)}, id, queuePrefix(c.Queue)).Int()
	if err != nil {
		c.Log.Debug("wake claim failed; the queue's poll takes the task", "queue", c.Queue, "task_id", id, "err", err)
	}
	return err == nil && n == 1
}

// handle runs the claimed task w and puts it back on the queue if it
// fails, or if its handler panics (process).
func (c *WakeConsumer) handle(ctx context.Context, w Wakeup) {
	err := c.process(ctx, w)
	if err == nil || errors.Is(err, asynq.SkipRetry) {
		if err != nil {
			c.Log.Warn("task failed for good", "queue", c.Queue, "type", w.Type, "task_id", w.ID, "err", err)
		}
		return
	}
	c.Log.Debug("task failed; back on the queue", "queue", c.Queue, "type", w.Type, "task_id", w.ID, "err", err)
	retry, maxRetry := c.Retry, c.MaxRetry
	if retry == 0 {
		retry = time.Second
	}
	if maxRetry == 0 {
		maxRetry = 25
	}
	headers := maps.Clone(w.Headers)
	if headers == nil {
		headers = map[string]string{}
	}
	headers[HeaderPutBack] = "1" // its next delivery is not its first (FirstDelivery)
	t := asynq.NewTaskWithHeaders(w.Type, w.Payload, headers)
	if err := c.Enqueuer.Enqueue(ctx, t, asynq.Queue(c.Queue), asynq.TaskID(w.ID), asynq.MaxRetry(maxRetry),
		asynq.ProcessIn(retry)); err != nil {
		c.Log.Warn("failed task not put back; the resync recovers it", "queue", c.Queue, "task_id", w.ID, "err", err)
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
