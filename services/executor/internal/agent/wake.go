package agent

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/redis/go-redis/v9"
)

// Wake-list settings that are not worth a knob.
const (
	// wakeBlock is how long one blocking pop waits: an idle executor makes
	// one Redis command per wakeBlock on its wake list.
	wakeBlock = 5 * time.Second
	// wakeRetry is the pause after a failed pop (Redis down): the queue's
	// poll still delivers meanwhile.
	wakeRetry = time.Second
	// takenSize bounds the memory of attempts already taken (about 5 MB):
	// the second delivery of an attempt (its queued task after its wake-up,
	// or the other way round) normally comes within the queue's poll
	// interval, long before 100,000 other attempts.
	takenSize = 100_000
)

// taken remembers the attempts this executor started or dropped for good,
// so that the second of an attempt's two deliveries costs no request to
// the api.
type taken = lru.Cache[int64, struct{}]

func newTaken() *taken {
	c, err := lru.New[int64, struct{}](takenSize)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return c
}

// wake pops attempt ids from worker id's wake list (queue.WakeKey) until
// ctx ends and takes each at once, as the queued attempt:run task would:
// the wake list makes dispatch independent of the queue's poll interval,
// the queue stays the durable path. A malformed item is logged and
// skipped; a failed pop is retried after wakeRetry.
func (a *Agent) wake(ctx context.Context, id uuid.UUID) {
	rc, ok := a.redis.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		a.log.Error("no redis client for the wake list; the queue alone delivers attempts")
		return
	}
	stop := context.AfterFunc(ctx, func() { _ = rc.Close() }) // ends a blocking pop at once
	defer func() {
		if stop() {
			_ = rc.Close()
		}
	}()
	key := queue.WakeKey(queue.WorkerQueue(id.String()))
	for ctx.Err() == nil {
		res, err := rc.BLPop(ctx, wakeBlock, key).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			if ctx.Err() == nil {
				a.log.Debug("wake pop failed; retrying", "err", err)
				sleepCtx(ctx, wakeRetry)
			}
			continue
		}
		attemptID, err := strconv.ParseInt(res[1], 10, 64)
		if err != nil {
			a.log.Warn("malformed wake-up item; skipped", "item", res[1])
			continue
		}
		go func() {
			if err := a.take(ctx, id, attemptID); err != nil {
				a.log.Debug("woken attempt not taken; its queued task will deliver it", "attempt_id", attemptID, "err", err)
			}
		}()
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
