package server

import (
	"context"
	"sync"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/hibiken/asynq"
)

// maxStartBatch is the most runs one runs:start message of runStarts names
// (a batch create's message names up to 1,000).
const maxStartBatch = 1000

// runStarts gathers the scheduler's start messages of runs created at the
// same time, as an executor gathers its reads of attempts: a start sent
// while none is in flight goes at once, alone, as run:start; the starts
// sent meanwhile go together in the next round, one runs:start message for
// the runs of one project/domain and trace (creates that carry no trace
// share one). Sixteen clients creating runs one by one so cost the api one
// enqueue and the scheduler one claim for several runs, not one each, and
// a lone create waits for no one.
type runStarts struct {
	enqueue func(context.Context, *asynq.Task) error

	mu      sync.Mutex
	queue   []*pendingStart
	sending bool
}

// pendingStart is a start waiting for its message's enqueue.
type pendingStart struct {
	ctx   context.Context // the creator's: its trace, when it leads a message
	key   domain.RunKey
	trace string
	done  chan error // buffered
}

// send tells the scheduler to start the runs of keys (one for a create,
// several for an event's triggers), with others sent at the same time
// (runStarts), and returns once their messages are enqueued. Errors: the
// first enqueue's (the runs are recorded: the scheduler's resync starts
// them), ctx's when it ends first.
func (r *runStarts) send(ctx context.Context, keys ...domain.RunKey) error {
	if len(keys) == 0 {
		return nil
	}
	trace := obs.TraceParent(ctx)
	ps := make([]*pendingStart, len(keys))
	for i, key := range keys {
		ps[i] = &pendingStart{ctx: ctx, key: key, trace: trace, done: make(chan error, 1)}
	}
	r.mu.Lock()
	r.queue = append(r.queue, ps...)
	lead := !r.sending
	r.sending = true
	r.mu.Unlock()
	if lead {
		go r.flush()
	}
	var first error
	for _, p := range ps {
		select {
		case err := <-p.done:
			if first == nil {
				first = err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

// flush sends the queued starts, round after round, until none is left.
func (r *runStarts) flush() {
	for {
		r.mu.Lock()
		batch := r.queue
		r.queue = nil
		if len(batch) == 0 {
			r.sending = false
		}
		r.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		for _, g := range startGroups(batch) {
			err := r.enqueue(context.WithoutCancel(g[0].ctx), startTask(g))
			for _, p := range g {
				p.done <- err
			}
		}
	}
}

// startGroups splits batch into its messages: by project/domain and trace,
// in the order of each one's first start, maxStartBatch runs at most each.
func startGroups(batch []*pendingStart) [][]*pendingStart {
	var out [][]*pendingStart
	at := map[[3]string]int{}
	for _, p := range batch {
		k := [3]string{p.key.Project, p.key.Domain, p.trace}
		i, ok := at[k]
		if !ok || len(out[i]) == maxStartBatch {
			i = len(out)
			at[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], p)
	}
	return out
}

// startTask is the message of group g (one project/domain): run:start for
// one run, runs:start for several.
func startTask(g []*pendingStart) *asynq.Task {
	if len(g) == 1 {
		return queue.NewRunStartTask(g[0].key)
	}
	names := make([]string, len(g))
	for i, p := range g {
		names[i] = p.key.Run
	}
	return queue.NewRunsStartTask(g[0].key.Project, g[0].key.Domain, names)
}
