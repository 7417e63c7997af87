package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/hibiken/asynq"
)

// ResyncResult is what one resync pass did.
type ResyncResult struct {
	// Pending is how many aborts (actions with abort_requested_at set) and
	// kills (attempts with kill_requested_at set) are pending.
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

// runOnce re-enqueues every pending abort and kill (Flyte's startup scan;
// in Capstan every service resyncs from Postgres on start and on a period).
// The TaskID is the dedupe key, so a push of one already queued,
// running or in backoff changes nothing. It returns the first error, if
// any, after trying every push.
func (r *Reconciler) runOnce(ctx context.Context) (ResyncResult, error) {
	var res ResyncResult
	keys, err := r.store.ListPendingAborts(ctx)
	if err != nil {
		return res, fmt.Errorf("list pending aborts: %w", err)
	}
	ids, err := r.store.ListPendingKills(ctx)
	if err != nil {
		return res, fmt.Errorf("list pending kills: %w", err)
	}
	items := make([]pendingItem, 0, len(keys)+len(ids))
	for _, key := range keys {
		items = append(items, pendingItem{kindAction, key.String(), queue.NewActionAbortTask(key, r.cfg.TaskMaxRetry())})
	}
	for _, id := range ids {
		items = append(items, pendingItem{kindAttempt, queue.AttemptKillTaskID(id),
			queue.NewAttemptKillTask(id, r.cfg.TaskMaxRetry())})
	}
	res.Pending = len(items)
	r.metrics.pending.WithLabelValues(kindAction).Set(float64(len(keys)))
	r.metrics.pending.WithLabelValues(kindAttempt).Set(float64(len(ids)))
	var first error
	for _, it := range items {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		result, err := r.push(ctx, it)
		if err != nil {
			res.Failed++
			first = cmp.Or(first, fmt.Errorf("push %s %s: %w", it.task.Type(), it.id, err))
			continue
		}
		r.metrics.resyncEnqueued.WithLabelValues(it.kind, result).Inc()
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

// pendingItem is one pending abort or kill to push: its kind, TaskID and task.
type pendingItem struct {
	kind string
	id   string
	task *asynq.Task
}

// push enqueues it and says what happened: enqueued, duplicate, or revived
// (an archived task with the same TaskID, which would block every push
// forever, was deleted and replaced).
func (r *Reconciler) push(ctx context.Context, it pendingItem) (string, error) {
	dup, err := r.enqueue(ctx, it.task)
	if err != nil || !dup {
		return resultEnqueued, err
	}
	id := it.id
	info, err := r.inspector.GetTaskInfo(r.cfg.Queue, id)
	if err != nil || info.State != asynq.TaskStateArchived {
		// Not found: the task finished since the push; the next pass sees
		// whether the request is still pending.
		return resultDuplicate, nil
	}
	if err := r.inspector.DeleteTask(r.cfg.Queue, id); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return "", fmt.Errorf("delete archived task: %w", err)
	}
	if dup, err = r.enqueue(ctx, it.task); err != nil || dup {
		return resultDuplicate, err
	}
	r.log.Warn("archived abort task revived", "key", id, "last_err", info.LastErr)
	return resultRevived, nil
}

// enqueue pushes t on the reconciler's queue and reports whether the push
// was a TaskID duplicate (the same work is queued, running or in backoff).
func (r *Reconciler) enqueue(ctx context.Context, t *asynq.Task) (dup bool, err error) {
	_, err = r.client.EnqueueContext(ctx, t, asynq.Queue(r.cfg.Queue))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("enqueue %s: %w", t.Type(), err)
	}
	return false, nil
}
