package agent

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/google/uuid"
)

// maxRead is the most attempts one read asks for (the api takes 256).
const maxRead = 256

// attemptReads gathers the reads of attempts that an executor's handlers
// make while a read is in flight into the next one, as reportBatcher does
// with reports: a read made while none is in flight goes at once, alone;
// those made meanwhile go together (GET /v1/workers/{id}/attempts). A pass
// that places many tasks on the executor costs the api one request and one
// statement for them, not one each.
type attemptReads struct {
	mu      sync.Mutex
	queue   []*pendingRead
	sending bool
}

// pendingRead is a read waiting for its request's answer.
type pendingRead struct {
	ctx  context.Context // the reader's: its trace, when it leads a read
	id   int64
	done chan readOutcome // buffered
}

type readOutcome struct {
	spec workerapi.AttemptSpec
	err  error
}

// Attempt returns what the executor needs to run attempt id, placed on
// worker. Reads made while another is in flight share the next request
// (attemptReads), once worker is the executor's current registration; else
// the read goes alone (GET /v1/attempts/{id}). Errors: ErrAttemptNotFound
// for an attempt the control plane does not know or placed on another
// worker; StatusError and transport errors, not retried (the caller's
// queue retries).
func (c *Client) Attempt(ctx context.Context, worker uuid.UUID, id int64) (workerapi.AttemptSpec, error) {
	if w := c.worker.Load(); w == nil || *w != worker {
		return c.attemptAlone(ctx, id)
	}
	p := &pendingRead{ctx: ctx, id: id, done: make(chan readOutcome, 1)}
	r := &c.reads
	r.mu.Lock()
	r.queue = append(r.queue, p)
	lead := !r.sending
	r.sending = true
	r.mu.Unlock()
	if lead {
		go c.flushReads(worker)
	}
	select {
	case o := <-p.done:
		return o.spec, o.err
	case <-ctx.Done():
		return workerapi.AttemptSpec{}, fmt.Errorf("get attempt: %w", ctx.Err())
	}
}

// flushReads makes the queued reads, maxRead at a time, until none is
// left.
func (c *Client) flushReads(worker uuid.UUID) {
	r := &c.reads
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.sending = false
			r.mu.Unlock()
			return
		}
		n := min(len(r.queue), maxRead)
		batch := r.queue[:n:n]
		r.queue = r.queue[n:]
		r.mu.Unlock()
		c.readBatch(worker, batch)
	}
}

// readBatch reads the attempts of batch in one request and hands each its
// outcome.
func (c *Client) readBatch(worker uuid.UUID, batch []*pendingRead) {
	ids := make([]int64, len(batch))
	for i, p := range batch {
		ids[i] = p.id
	}
	ctx := context.WithoutCancel(batch[0].ctx)
	res, err := c.api.GetWorkerAttemptsWithResponse(ctx, worker, &workerapi.GetWorkerAttemptsParams{Ids: ids})
	switch {
	case err != nil:
		err = fmt.Errorf("get attempts: %w", err)
	case res.JSON200 == nil:
		err = &StatusError{"get attempts", res.StatusCode(), string(res.Body)}
	}
	found := map[int64]workerapi.AttemptSpec{}
	if err == nil {
		for _, spec := range res.JSON200.Attempts {
			found[spec.Id] = spec
		}
	}
	for _, p := range batch {
		spec, ok := found[p.id]
		switch {
		case err != nil:
			p.done <- readOutcome{err: err}
		case !ok:
			p.done <- readOutcome{err: ErrAttemptNotFound}
		default:
			p.done <- readOutcome{spec: spec}
		}
	}
}

// attemptAlone reads attempt id alone (GET /v1/attempts/{id}). Errors:
// ErrAttemptNotFound on 404.
func (c *Client) attemptAlone(ctx context.Context, id int64) (workerapi.AttemptSpec, error) {
	res, err := c.api.GetAttemptWithResponse(ctx, id)
	switch {
	case err != nil:
		return workerapi.AttemptSpec{}, fmt.Errorf("get attempt: %w", err)
	case res.StatusCode() == http.StatusNotFound:
		return workerapi.AttemptSpec{}, ErrAttemptNotFound
	case res.JSON200 == nil:
		return workerapi.AttemptSpec{}, &StatusError{"get attempt", res.StatusCode(), string(res.Body)}
	}
	return *res.JSON200, nil
}
