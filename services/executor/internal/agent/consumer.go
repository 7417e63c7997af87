package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
)

// Consumer settings that are not worth a knob.
const (
	// delayedCheck is asynq's DelayedTaskCheckInterval: retries (after
	// "all slots busy", rare: the scheduler places on free slots) become
	// pending this often. Each check is two Redis commands.
	delayedCheck = time.Second
	// shutdownTimeout bounds asynq's shutdown; handlers return at once.
	shutdownTimeout = 2 * time.Second
	// maxTaskRetryDelay caps the retry delay of a failed attempt:run task.
	maxTaskRetryDelay = 30 * time.Second
	// attemptRunRetries is the MaxRetry of an attempt:run task the wake
	// list's consumer puts back (queue.NewAttemptRunTask's).
	attemptRunRetries = 10
)

// consume runs an asynq server on queue worker:<id>, and a WakeConsumer of
// the queue's wake list, until ctx ends.
func (a *Agent) consume(ctx context.Context, id uuid.UUID) {
	q := queue.WorkerQueue(id.String())
	srv := asynq.NewServer(a.redis, asynq.Config{
		Concurrency:              a.cfg.Slots,
		Queues:                   map[string]int{q: 1},
		TaskCheckInterval:        a.cfg.PollInterval,
		DelayedTaskCheckInterval: delayedCheck,
		ShutdownTimeout:          shutdownTimeout,
		RetryDelayFunc:           a.retryDelay,
		IsFailure:                isFailure,
		Logger:                   svc.AsynqLogger(a.log.With("queue", q)),
		LogLevel:                 svc.AsynqLevel(ctx, a.log),
	})
	mux := asynq.NewServeMux()
	mux.Use(obs.TaskMiddleware)
	mux.HandleFunc(queue.TypeAttemptRun, func(ctx context.Context, t *asynq.Task) error {
		return a.handleAttemptRun(ctx, id, t)
	})
	mux.HandleFunc(queue.TypeAttemptsRun, func(ctx context.Context, t *asynq.Task) error {
		return a.handleAttemptsRun(ctx, id, t)
	})
	mux.HandleFunc(queue.TypeRunsRemove, func(ctx context.Context, t *asynq.Task) error {
		return a.handleRunsRemove(ctx, id, t)
	})
	if err := srv.Start(mux); err != nil {
		a.log.Error("consumer did not start", "queue", q, "err", err)
		return
	}
	a.log.Info("consuming", "queue", q)
	// New attempts announced on the wake list start at once, not at the
	// queue's next poll (Enqueue announces them after placement commits).
	client := asynq.NewClient(a.redis)
	wake := &queue.WakeConsumer{Queue: q, Redis: a.redis, Enqueuer: queue.NewEnqueuer(client, a.log),
		Handler: mux, Concurrency: a.cfg.Slots, Retry: a.cfg.FullRetryDelay, MaxRetry: attemptRunRetries, Log: a.log}
	wake.Run(ctx)
	srv.Shutdown()
	_ = client.Close()
}

// errSpecsUsed marks the error of a message whose specs started attempts
// (startAttempt): isFailure counts it, so that asynq's retry of the
// message is not its first delivery (queue.FirstDelivery) and reads every
// attempt, one that ran meanwhile included.
var errSpecsUsed = errors.New("started from the message's specs")

// handleAttemptRun takes attempt:run, from the queue or claimed off it by
// the wake list's consumer, and starts its attempt (startAttempt): from the
// message's spec on its first delivery, once it verifies (dispatched), else
// as the api reads it. A message whose spec does not verify runs nothing.
func (a *Agent) handleAttemptRun(ctx context.Context, worker uuid.UUID, t *asynq.Task) error {
	var p queue.AttemptPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	if p.Spec == nil || !queue.FirstDelivery(ctx, t) {
		return a.startAttempt(ctx, worker, p.AttemptID, nil)
	}
	specs, ok := a.dispatched(worker, []int64{p.AttemptID}, []queue.SignedSpec{*p.Spec})
	if !ok {
		return nil
	}
	return specsUsed(a.startAttempt(ctx, worker, p.AttemptID, specs[p.AttemptID]))
}

// handleAttemptsRun takes attempts:run and starts each of its attempts
// (startAttempt) at once, so that their reads share requests: those the
// message carries a spec of from it on its first delivery, once every spec
// verifies (dispatched). A message with a spec that does not verify runs
// nothing. Errors: those of the attempts, joined: the message is retried
// whole, which starts nothing twice (an attempt held, or ended, is dropped
// then: a retry reads every attempt).
func (a *Agent) handleAttemptsRun(ctx context.Context, worker uuid.UUID, t *asynq.Task) error {
	var p queue.AttemptsPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	specs := map[int64]*workerapi.AttemptSpec{}
	if len(p.Specs) > 0 && queue.FirstDelivery(ctx, t) {
		var ok bool
		if specs, ok = a.dispatched(worker, p.AttemptIDs, p.Specs); !ok {
			return nil
		}
	}
	errs := make([]error, len(p.AttemptIDs))
	var wg sync.WaitGroup
	for i, id := range p.AttemptIDs {
		wg.Go(func() { errs[i] = a.startAttempt(ctx, worker, id, specs[id]) })
	}
	wg.Wait()
	err := errors.Join(errs...)
	if len(specs) > 0 {
		return specsUsed(err)
	}
	return err
}

// dispatched returns the specs a dispatch message to worker carries, by
// attempt id, once each verifies under the worker's dispatch key (the
// scheduler signed it for this worker: queue.SignedSpec) and is of one of
// the attempts ids the message names. ok is false, and the message must
// run nothing, when one does not: it was forged or altered in Redis, or
// signed for another worker or registration. The attempts it named that
// Postgres still holds ASSIGNED here are dispatched again, by id, by the
// scheduler's resync.
func (a *Agent) dispatched(worker uuid.UUID, ids []int64, signed []queue.SignedSpec) (map[int64]*workerapi.AttemptSpec,
	bool) {
	key := a.client.DispatchKey(worker)
	specs := make(map[int64]*workerapi.AttemptSpec, len(signed))
	for _, s := range signed {
		spec, err := s.Verify(key)
		if err == nil && !slices.Contains(ids, spec.Id) {
			err = fmt.Errorf("a spec of attempt %d, which the message does not name", spec.Id)
		}
		if err != nil {
			a.log.Error("dispatch refused: nothing of the message runs", "worker_id", worker, "attempt_ids", ids,
				"err", err)
			return nil, false
		}
		specs[spec.Id] = &spec
	}
	return specs, true
}

// specsUsed marks err, when not nil, with errSpecsUsed.
func specsUsed(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w (%w)", err, errSpecsUsed)
}

// startAttempt starts attempt id, as spec says when not nil (what the
// placement pass bound, carried by its first message and verified as the
// scheduler's for this worker, see dispatched: the attempt starts
// unread, and its BUILDING report's answer confirms it may run, see
// supervisor.StartDispatched), else as the api reads it. It drops an
// attempt the control plane does not know, does not want run, or gave to
// another worker; does nothing for an attempt already held (a
// re-delivery); and otherwise starts it and returns at once: the process
// outlives the task. Errors, naming the attempt: supervisor.ErrFull
// (retried after FullRetryDelay), a failure to read the attempt (retried
// with backoff).
func (a *Agent) startAttempt(ctx context.Context, worker uuid.UUID, id int64, spec *workerapi.AttemptSpec) error {
	log := a.log.With("attempt_id", id)
	if a.sup.Holds(id) {
		log.Debug("attempt already held")
		return nil
	}
	start := a.sup.StartDispatched
	if spec == nil {
		start = a.sup.StartInTrace
		read, err := a.client.Attempt(ctx, worker, id)
		if errors.Is(err, ErrAttemptNotFound) {
			log.Info("attempt unknown to the control plane; dropped")
			return nil
		}
		if err != nil {
			return fmt.Errorf("attempt %d: %w", id, err)
		}
		spec = &read
	}
	switch {
	case !spec.Proceed:
		log.Info("attempt must not run; dropped", "state", spec.State)
		return nil
	case spec.WorkerId != nil && *spec.WorkerId != worker.String():
		log.Info("attempt belongs to another worker; dropped", "worker_id", *spec.WorkerId)
		return nil
	}
	if err := start(ctx, *spec); err != nil {
		return fmt.Errorf("attempt %d: %w", id, err)
	}
	return nil
}

// retryDelay is asynq's RetryDelayFunc: FullRetryDelay when every slot was
// busy, else 500ms doubling per retry up to 30s.
func (a *Agent) retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	if errors.Is(err, supervisor.ErrFull) {
		return a.cfg.FullRetryDelay
	}
	return min(500*time.Millisecond<<min(n, 10), maxTaskRetryDelay)
}

// isFailure is asynq's IsFailure: waiting for a slot or for a shutdown does
// not use up the task's retries, but for a message whose specs started
// attempts (errSpecsUsed).
func isFailure(err error) bool {
	return errors.Is(err, errSpecsUsed) || !errors.Is(err, supervisor.ErrFull) && !errors.Is(err, supervisor.ErrClosed)
}
