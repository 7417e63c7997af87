package queue

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
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
// from the queue (asynq's DeleteTask of a pending task is atomic against
// the consumer's dequeue): a task the poll already took, or that is gone,
// is skipped, so each task is handled by one of the two paths. The claim is
// made by the goroutine that then handles the task, so the pops go on while
// it waits on Redis: the tasks a placement announces together are claimed
// and handled together (an executor's reads of them then share requests),
// not one round trip after the other. A task whose
// handler fails is put back on the queue under its id, due after Retry, so
// that the queue's retries take over (unless the error wraps
// asynq.SkipRetry). Replicas may share a wake list: each item goes to one.
type WakeConsumer struct {
	// Queue is the queue whose wake list is read (WakeKey(Queue)).
	Queue string
	// Redis holds the wake list (the consumer opens a connection of its
	// own); Inspector and Enqueuer act on the queue in the same Redis. A
	// task put back is due later, so the Enqueuer does not announce it.
	Redis     asynq.RedisConnOpt
	Inspector *asynq.Inspector
	Enqueuer  *Enqueuer
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
				if err := c.Inspector.DeleteTask(c.Queue, w.ID); err != nil {
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

// handle runs the claimed task w and puts it back on the queue if it
// fails.
func (c *WakeConsumer) handle(ctx context.Context, w Wakeup) {
	err := c.Handler.ProcessTask(ctx, asynq.NewTaskWithHeaders(w.Type, w.Payload, w.Headers))
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
	t := asynq.NewTaskWithHeaders(w.Type, w.Payload, w.Headers)
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
