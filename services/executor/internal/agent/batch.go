package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/google/uuid"
)

// Batch bounds: the most reports one batch carries (the api takes 1,000),
// and the most bytes by reportSize's worst case (the api takes 16 MiB a
// batch, 8 MiB a report alone: a report bigger than maxBatchBytes goes
// alone).
const (
	maxBatch      = 500
	maxBatchBytes = 8 << 20
)

// itemSize bounds the JSON size of a batch item from above: every string
// byte written as six (\u00XX), plus the fixed fields.
func itemSize(item workerapi.BatchedReport) int {
	if item.Report != nil {
		return reportSize(*item.Report)
	}
	n := 0
	if item.Logs != nil {
		for _, c := range *item.Logs {
			n += len(c.Data) + 64
		}
	}
	return 6*n + 512
}

// reportSize bounds the JSON size of a report from above.
func reportSize(r workerapi.AttemptReport) int {
	n := 0
	for _, p := range []*string{r.Stdout, r.Stderr, r.Error} {
		if p != nil {
			n += len(*p)
		}
	}
	if r.Outputs != nil {
		for k, v := range *r.Outputs {
			n += len(k) + len(v)
		}
	}
	if r.Cleanup != nil {
		for _, c := range *r.Cleanup {
			if c.Error != nil {
				n += len(*c.Error)
			}
		}
	}
	return 6*n + 512
}

// reportBatcher gathers the reports of the attempts an executor holds into
// batches, as a database's group commit does: a report made while no batch
// is in flight goes at once, alone; those made while one is in flight go
// together in the next. An idle executor's reports wait for nothing; a
// busy one's share requests and transactions.
type reportBatcher struct {
	mu      sync.Mutex
	queue   []*pendingReport
	sending bool
	// beat is a heartbeat riding along with the next batch (rideAlong).
	beat *pendingBeat
}

// pendingBeat is a heartbeat waiting for its batch's answer.
type pendingBeat struct {
	report workerapi.HeartbeatReport
	done   chan beatOutcome
}

type beatOutcome struct {
	stop []int64
	err  error
}

// pendingReport is a report waiting for its batch's answer.
type pendingReport struct {
	ctx  context.Context // the reporter's: its trace, when it leads a batch
	item workerapi.BatchedReport
	size int // reportSize
	done chan reportOutcome
}

type reportOutcome struct {
	proceed bool
	err     error
}

// Report sends reps about attempt id, in order, and returns whether the
// attempt may proceed (false when any answer says it must stop). Reports
// made together go in the same batch (but for maxBatch and maxBatchBytes).
// Once the executor is registered, reports travel in batches (POST
// /v1/workers/{id}/reports), one transaction each at the api, in the order
// they were made: a report of an attempt made after another (even before
// the other returned) is in the same batch or a later one, so order per
// attempt holds. Transport errors and 5xx answers are retried, the delay
// starting at ReportBackoff and doubling up to 2s, for at most
// ReportTimeout, so a brief api outage loses no result; a resent batch
// changes nothing that the first one recorded. A 409 means the control
// plane's view conflicts with the executor's (the attempt moved on):
// proceed is false. Any other 4xx is not retried: the error wraps
// ErrRejected. Before registration a report goes alone.
func (c *Client) Report(ctx context.Context, id int64, reps ...workerapi.AttemptReport) (bool, error) {
	if c.worker.Load() == nil {
		proceed := true
		for _, rep := range reps {
			ok, err := c.reportAlone(ctx, id, rep)
			if err != nil {
				return ok, err
			}
			proceed = proceed && ok
		}
		return proceed, nil
	}
	items := make([]workerapi.BatchedReport, len(reps))
	for i := range reps {
		items[i] = workerapi.BatchedReport{AttemptId: id, Report: &reps[i]}
	}
	return c.submit(ctx, items...)()
}

// Submit queues rep about attempt id for the next batch, as Report sends
// it, and returns at once; wait returns Report's answer. Before
// registration the report is sent alone, before Submit returns.
func (c *Client) Submit(ctx context.Context, id int64, rep workerapi.AttemptReport) (wait func() (bool, error)) {
	if c.worker.Load() == nil {
		proceed, err := c.reportAlone(ctx, id, rep)
		return func() (bool, error) { return proceed, err }
	}
	return c.submit(ctx, workerapi.BatchedReport{AttemptId: id, Report: &rep})
}

// enqueue puts item in the next batch and waits for its outcome.
func (c *Client) enqueue(ctx context.Context, item workerapi.BatchedReport) (bool, error) {
	return c.submit(ctx, item)()
}

// submit puts items, in order, in the next batch and returns a function
// that waits for their outcome (or ctx's end): proceed unless one says
// stop, the first error.
func (c *Client) submit(ctx context.Context, items ...workerapi.BatchedReport) func() (bool, error) {
	ps := make([]*pendingReport, len(items))
	for i, item := range items {
		ps[i] = &pendingReport{ctx: ctx, item: item, size: itemSize(item), done: make(chan reportOutcome, 1)}
	}
	b := &c.batch
	b.mu.Lock()
	b.queue = append(b.queue, ps...)
	lead := !b.sending
	b.sending = true
	b.mu.Unlock()
	if lead {
		go c.flush()
	}
	return func() (bool, error) {
		proceed := true
		for _, p := range ps {
			select {
			case o := <-p.done:
				if o.err != nil {
					return o.proceed, o.err
				}
				proceed = proceed && o.proceed
			case <-ctx.Done():
				return true, fmt.Errorf("%s: %w", itemName(p.item), ctx.Err())
			}
		}
		return proceed, nil
	}
}

// itemName names a batch item in errors: "report RUNNING", "logs".
func itemName(item workerapi.BatchedReport) string {
	if item.Report != nil {
		return "report " + string(item.Report.State)
	}
	return "logs"
}

// flush sends the queued reports, a batch at a time, until none is left.
func (c *Client) flush() {
	b := &c.batch
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.sending = false
			b.mu.Unlock()
			return
		}
		n := batchLen(b.queue)
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		beat := b.beat
		b.beat = nil
		b.mu.Unlock()
		c.sendBatch(batch, beat)
	}
}

// batchLen is how many of the queued reports (at least one) the next batch
// takes: at most maxBatch, and no more than maxBatchBytes by their sizes
// unless the first alone is bigger.
func batchLen(queue []*pendingReport) int {
	n, bytes := 1, queue[0].size
	for n < min(len(queue), maxBatch) && bytes+queue[n].size <= maxBatchBytes {
		bytes += queue[n].size
		n++
	}
	return n
}

// rideWait is how long a heartbeat waits for the batch it rides along
// with to leave. A batch that leaves later waits behind one in flight that
// is slow (an api waiting on a lock, or retrying through an api restart);
// the beat is then sent alone, so that a slow batch never holds a live
// worker's heartbeats past its grace.
const rideWait = 100 * time.Millisecond

// rideAlong puts heartbeat r of worker id in the next batch when reports
// are queued for one, and then waits for its answer: rode is false when
// none is queued (or another heartbeat rides already), or when the batch
// did not leave within rideWait (the beat is taken back), and the caller
// sends r alone. A beat that left is waited for, however long: a later beat
// must not overtake it, or the api would read the older beat's list last
// (the lost-attempt rule, domain.LossOnBeat, counts on beats in order).
// Errors: as Heartbeat's.
func (c *Client) rideAlong(ctx context.Context, id uuid.UUID, r workerapi.HeartbeatReport) (stop []int64, rode bool, err error) {
	b := &c.batch
	p := &pendingBeat{report: r, done: make(chan beatOutcome, 1)}
	b.mu.Lock()
	w := c.worker.Load()
	rode = w != nil && *w == id && b.sending && len(b.queue) > 0 && b.beat == nil
	if rode {
		b.beat = p
	}
	b.mu.Unlock()
	if !rode {
		return nil, false, nil
	}
	wait := time.NewTimer(rideWait)
	defer wait.Stop()
	for {
		select {
		case o := <-p.done:
			return o.stop, true, o.err
		case <-ctx.Done():
			return nil, true, fmt.Errorf("heartbeat: %w", ctx.Err())
		case <-wait.C: // fires once: then only the answer or ctx ends the wait
			if b.takeBack(p) {
				return nil, false, nil
			}
		}
	}
}

// takeBack removes beat p from the next batch and reports true, or reports
// false when p already left with a batch.
func (b *reportBatcher) takeBack(p *pendingBeat) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.beat != p {
		return false
	}
	b.beat = nil
	return true
}

// sendBatch sends one batch, with beat riding along when not nil, retrying
// as Report says, and hands each report, and beat, its outcome.
func (c *Client) sendBatch(batch []*pendingReport, beat *pendingBeat) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), c.cfg.ReportTimeout)
	defer cancel()
	req := workerapi.ReportBatch{Reports: make([]workerapi.BatchedReport, len(batch))}
	for i, p := range batch {
		req.Reports[i] = p.item
	}
	if beat != nil {
		req.Heartbeat = &beat.report
	}
	var outcomes []reportOutcome
	var stop []int64
	err := c.retry(ctx, "report batch", func() error {
		var err error
		outcomes, stop, err = c.sendBatchOnce(ctx, req)
		return err
	})
	if beat != nil {
		beat.done <- beatOutcome{stop, err}
	}
	for i, p := range batch {
		switch {
		case errors.Is(err, errItemsRecorded):
			p.done <- reportOutcome{true, nil}
		case err != nil:
			p.done <- reportOutcome{true, err}
		default:
			p.done <- outcomes[i]
		}
	}
}

// errItemsRecorded: the api recorded a batch's items, then found its
// heartbeat's worker unknown or dead (404).
var errItemsRecorded = errors.New("the batch's items were recorded")

// sendBatchOnce makes one request and returns each report's outcome, and
// the heartbeat's stop list when one rode along. Errors: with a heartbeat,
// ErrUnknownWorker on 404 (with errItemsRecorded) or 401 (the token went
// with the worker's record: nothing was recorded).
func (c *Client) sendBatchOnce(ctx context.Context, req workerapi.ReportBatch) ([]reportOutcome, []int64, error) {
	worker := *c.worker.Load()
	res, err := c.api.ReportAttemptsWithResponse(ctx, worker, req)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("report batch: %w", err)
	case req.Heartbeat != nil && res.StatusCode() == http.StatusNotFound:
		return nil, nil, fmt.Errorf("report batch: %w (%w, %w)", ErrUnknownWorker, errItemsRecorded, ErrRejected)
	case req.Heartbeat != nil && res.StatusCode() == http.StatusUnauthorized:
		return nil, nil, fmt.Errorf("%w: %w", ErrUnknownWorker, &StatusError{"report batch", res.StatusCode(), string(res.Body)})
	case res.JSON200 == nil:
		return nil, nil, &StatusError{"report batch", res.StatusCode(), string(res.Body)}
	case len(res.JSON200.Results) != len(req.Reports):
		return nil, nil, fmt.Errorf("report batch: %d results for %d reports", len(res.JSON200.Results), len(req.Reports))
	}
	out := make([]reportOutcome, len(req.Reports))
	for i, r := range res.JSON200.Results {
		out[i] = c.outcome(req.Reports[i], r)
	}
	var stop []int64
	if res.JSON200.Stop != nil {
		stop = *res.JSON200.Stop
	}
	return out, stop, nil
}

// outcome is one report's outcome from its result in a batch's answer.
func (c *Client) outcome(item workerapi.BatchedReport, r workerapi.BatchedReportResult) reportOutcome {
	switch {
	case r.Error == nil:
		return reportOutcome{r.Proceed, nil}
	case r.Error.Status == http.StatusConflict && item.Report != nil:
		c.log.Info("report conflicts with the control plane; stopping the attempt", "attempt_id", item.AttemptId,
			"state", item.Report.State, "detail", r.Error.Detail)
		return reportOutcome{false, nil}
	}
	detail := r.Error.Title
	if r.Error.Detail != nil {
		detail = *r.Error.Detail
	}
	return reportOutcome{true, &StatusError{itemName(item), r.Error.Status, detail}}
}
