package queue_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// recorder is a handler that records the tasks it gets and fails those
// whose type is in fail.
type recorder struct {
	mu   sync.Mutex
	got  []string
	fail string
}

func (r *recorder) ProcessTask(_ context.Context, t *asynq.Task) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, t.Type()+" "+string(t.Payload()))
	if t.Type() == r.fail {
		return errors.New("boom")
	}
	return nil
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// A task announced on the Scheduler queue's wake list is handled at once,
// once, and no longer waits in the queue; one that fails goes back on the
// queue under its id, due later; a wake-up whose task the queue's poll
// already took is skipped.
func TestWakeConsumerClaimsAnnouncedTasks(t *testing.T) {
	opt := redistest.New(t)
	client := asynq.NewClient(opt)
	defer client.Close()
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	rc := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: opt.DB})
	defer rc.Close()
	log := slog.New(slog.DiscardHandler)
	enq := queue.NewEnqueuer(client, log)
	enq.Wake = rc
	rec := &recorder{fail: queue.TypeTaskEvaluate}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	wc := &queue.WakeConsumer{Queue: queue.Scheduler, Redis: opt, Enqueuer: enq, Handler: rec, Concurrency: 1,
		Retry: time.Hour, Log: log}
	go func() { wc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	key := domain.RunKey{Project: "p", Domain: "d", Run: "r1"}
	require.NoError(t, enq.Enqueue(ctx, queue.NewRunStartTask(key)))
	require.Eventually(t, func() bool { return len(rec.seen()) == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{`run:start {"project":"p","domain":"d","run":"r1"}`}, rec.seen())
	_, err := insp.GetTaskInfo(queue.Scheduler, "run:p/d/r1")
	require.ErrorIs(t, err, asynq.ErrTaskNotFound, "claimed off the queue")

	require.NoError(t, enq.Enqueue(ctx, queue.NewTaskEvaluateTask(7)))
	require.Eventually(t, func() bool {
		info, err := insp.GetTaskInfo(queue.Scheduler, "attempt:7:evaluate")
		return err == nil && info.State == asynq.TaskStateScheduled
	}, 10*time.Second, 5*time.Millisecond, "a failed task is back on the queue, due later")
	require.Len(t, rec.seen(), 2)
	info, err := insp.GetTaskInfo(queue.Scheduler, "attempt:7:evaluate")
	require.NoError(t, err)
	require.Equal(t, "1", info.Headers[queue.HeaderPutBack], "marked: its next delivery is not its first")
	require.False(t, queue.FirstDelivery(ctx, asynq.NewTaskWithHeaders(info.Type, info.Payload, info.Headers)))
	require.True(t, queue.FirstDelivery(ctx, queue.NewTaskEvaluateTask(7)))

	// The queue's poll took it first: here, the task is gone from the queue
	// before the wake-up is read.
	wc2 := queue.NewEnqueuer(client, log) // no Wake: announce by hand, after the delete
	require.NoError(t, wc2.Enqueue(ctx, queue.NewRunStartTask(domain.RunKey{Project: "p", Domain: "d", Run: "r2"})))
	require.NoError(t, insp.DeleteTask(queue.Scheduler, "run:p/d/r2"))
	require.NoError(t, rc.LPush(ctx, queue.WakeKey(queue.Scheduler),
		`{"id":"run:p/d/r2","type":"run:start","payload":"e30="}`).Err())
	require.NoError(t, enq.Enqueue(ctx, queue.NewRunStartTask(domain.RunKey{Project: "p", Domain: "d", Run: "r3"})))
	require.Eventually(t, func() bool { return len(rec.seen()) == 3 }, 10*time.Second, 5*time.Millisecond)
	require.NotContains(t, rec.seen()[2], "r2", "the wake-up of a task already taken is skipped")

	// The queue's consumer is handling it (active): the wake-up is skipped.
	srv := asynq.NewServer(opt, asynq.Config{Queues: map[string]int{queue.Scheduler: 1}, Concurrency: 1,
		TaskCheckInterval: 10 * time.Millisecond, Logger: svc.AsynqLogger(log)})
	release, taken := make(chan struct{}), make(chan struct{})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		close(taken)
		<-release
		return nil
	})))
	defer srv.Shutdown()
	defer close(release)
	require.NoError(t, wc2.Enqueue(ctx, queue.NewRunStartTask(domain.RunKey{Project: "p", Domain: "d", Run: "r4"})))
	<-taken
	info, err = insp.GetTaskInfo(queue.Scheduler, "run:p/d/r4")
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateActive, info.State)
	require.NoError(t, rc.LPush(ctx, queue.WakeKey(queue.Scheduler),
		`{"id":"run:p/d/r4","type":"run:start","payload":"e30="}`).Err())
	require.NoError(t, enq.Enqueue(ctx, queue.NewRunStartTask(domain.RunKey{Project: "p", Domain: "d", Run: "r5"})))
	require.Eventually(t, func() bool { return len(rec.seen()) == 4 }, 10*time.Second, 5*time.Millisecond)
	require.Contains(t, rec.seen()[3], "r5", "the wake-up of a task its queue's consumer has is skipped")
}

// panicker is a handler that panics on the first task it gets and records
// the others.
type panicker struct {
	recorder
	once sync.Once
}

func (p *panicker) ProcessTask(ctx context.Context, t *asynq.Task) error {
	panicked := false
	p.once.Do(func() { panicked = true })
	if panicked {
		panic("boom")
	}
	return p.recorder.ProcessTask(ctx, t)
}

// A handler that panics does not end the consumer: the task goes back on
// the queue, due later, as a failed one does, and the next task is handled.
func TestWakeConsumerSurvivesAPanickingHandler(t *testing.T) {
	opt := redistest.New(t)
	client := asynq.NewClient(opt)
	defer client.Close()
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	rc := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: opt.DB})
	defer rc.Close()
	log := slog.New(slog.DiscardHandler)
	enq := queue.NewEnqueuer(client, log)
	enq.Wake = rc
	h := &panicker{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	wc := &queue.WakeConsumer{Queue: queue.Scheduler, Redis: opt, Enqueuer: enq, Handler: h, Concurrency: 1,
		Retry: time.Hour, Log: log}
	go func() { wc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	require.NoError(t, enq.Enqueue(ctx, queue.NewTaskEvaluateTask(7)))
	require.Eventually(t, func() bool {
		info, err := insp.GetTaskInfo(queue.Scheduler, "attempt:7:evaluate")
		return err == nil && info.State == asynq.TaskStateScheduled
	}, 10*time.Second, 5*time.Millisecond, "the panicked task is back on the queue, due later")
	require.NoError(t, enq.Enqueue(ctx, queue.NewRunStartTask(domain.RunKey{Project: "p", Domain: "d", Run: "r1"})))
	require.Eventually(t, func() bool { return len(h.seen()) == 1 }, 10*time.Second, 5*time.Millisecond,
		"the consumer goes on")
}
