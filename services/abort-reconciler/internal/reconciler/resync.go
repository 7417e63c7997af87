package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/hibiken/asynq"
)

// ResyncResult is what one resync pass did.
type ResyncResult struct {
	// Pending is how many actions have abort_requested_at set.
	Pending int
	// Enqueued is how many of them had no task and got one.
	Enqueued int
	// Duplicates is how many already had a task (pending, active or waiting
	// in backoff): the TaskID dedupe made the push a no-op.
	Duplicates int
	// Revived is how many had an archived task (asynq gave up on it, Postgres
	// has not), which was replaced by a fresh one.
	Revived int
	// Failed is how many pushes failed (Redis unreachable).
	Failed int
}

// runOnce re-enqueues every pending abort (seeds/000 "Startup Scan"; DESIGN
// §1 "every service resyncs from Postgres on start and on a period"). The
// TaskID is the action key, so a push of an abort already queued, running or
// in backoff changes nothing. It returns the first push error, if any, after
// trying every abort.
func (r *Reconciler) runOnce(ctx context.Context) (ResyncResult, error) {
	r.resyncMu.Lock()
	defer r.resyncMu.Unlock()
	var res ResyncResult
	keys, err := r.store.ListPendingAborts(ctx)
	if err != nil {
		return res, fmt.Errorf("list pending aborts: %w", err)
	}
	res.Pending = len(keys)
	r.metrics.pending.Set(float64(len(keys)))
	var first error
	for _, key := range keys {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		result, err := r.push(ctx, key)
		if err != nil {
			res.Failed++
			first = cmp.Or(first, fmt.Errorf("push abort %s: %w", key, err))
			continue
		}
		r.metrics.resyncEnqueued.WithLabelValues(result).Inc()
		switch result {
		case resultEnqueued:
			res.Enqueued++
		case resultDuplicate:
			res.Duplicates++
		case resultRevived:
			res.Revived++
		}
	}
	return res, first
}

// push enqueues key's abort task and says what happened: enqueued,
// duplicate, or revived (an archived task with the same TaskID, which would
// block every push forever, was deleted and replaced).
func (r *Reconciler) push(ctx context.Context, key domain.ActionKey) (string, error) {
	dup, err := r.enqueue(ctx, key)
	if err != nil || !dup {
		return resultEnqueued, err
	}
	info, err := r.inspector.GetTaskInfo(r.cfg.Queue, key.String())
	if err != nil || info.State != asynq.TaskStateArchived {
		// Not found: the task finished since the push; the next pass sees
		// whether the abort is still pending.
		return resultDuplicate, nil
	}
	if err := r.inspector.DeleteTask(r.cfg.Queue, key.String()); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return "", fmt.Errorf("delete archived task: %w", err)
	}
	if dup, err = r.enqueue(ctx, key); err != nil || dup {
		return resultDuplicate, err
	}
	r.log.Warn("archived abort task revived", "key", key.String(), "last_err", info.LastErr)
	return resultRevived, nil
}

// enqueue pushes key's abort task and reports whether the push was a TaskID
// duplicate. queue.Enqueuer hides duplicates (it returns nil), so this reads
// its Duplicates counter around the call; runOnce's mutex makes that exact.
func (r *Reconciler) enqueue(ctx context.Context, key domain.ActionKey) (dup bool, err error) {
	before := r.enq.Duplicates.Load()
	err = r.enq.Enqueue(ctx, queue.NewActionAbortTask(key, r.cfg.TaskMaxRetry()), asynq.Queue(r.cfg.Queue))
	return r.enq.Duplicates.Load() > before, err
}
