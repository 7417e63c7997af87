package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/capstan-run/capstan/pkg/workerapi"
)

// maxReportBackoff caps the delay between report retries.
const maxReportBackoff = 2 * time.Second

// reportAlone sends rep about attempt id on its own (POST
// /v1/attempts/{id}/report) and returns whether the attempt may proceed.
// Transport errors and 5xx answers are retried, the delay starting at
// ReportBackoff and doubling up to 2s, for at most ReportTimeout, so a
// brief api outage loses no result. A 409 means the control plane's view
// conflicts with the executor's (the attempt moved on): proceed is false.
// Any other 4xx is not retried: the error wraps ErrRejected.
func (c *Client) reportAlone(ctx context.Context, id int64, rep workerapi.AttemptReport) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReportTimeout)
	defer cancel()
	proceed := true
	err := c.retry(ctx, "report "+string(rep.State), func() error {
		var err error
		proceed, err = c.reportOnce(ctx, id, rep)
		return err
	})
	return proceed, err // reportOnce answers true with every error
}

// retry calls once until it returns nil or an error wrapping ErrRejected,
// or ctx ends, waiting ReportBackoff, doubling up to 2s, between tries. It
// returns once's last error, joined with ctx's when ctx ended.
func (c *Client) retry(ctx context.Context, what string, once func() error) error {
	delay := c.cfg.ReportBackoff
	for try := 1; ; try++ {
		err := once()
		if err == nil || errors.Is(err, ErrRejected) {
			return err
		}
		c.log.Debug(what+" failed; retrying", "try", try, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s after %d tries: %w", what, try, errors.Join(ctx.Err(), err))
		case <-t.C:
		}
		delay = min(2*delay, maxReportBackoff)
	}
}

func (c *Client) reportOnce(ctx context.Context, id int64, rep workerapi.AttemptReport) (bool, error) {
	res, err := c.api.ReportAttemptWithResponse(ctx, id, rep)
	switch {
	case err != nil:
		return true, fmt.Errorf("report: %w", err)
	case res.JSON200 != nil:
		return res.JSON200.Proceed, nil
	case res.StatusCode() == http.StatusConflict:
		c.log.Info("report conflicts with the control plane; stopping the attempt", "attempt_id", id,
			"state", rep.State, "body", string(res.Body))
		return false, nil
	}
	return true, &StatusError{"report " + string(rep.State), res.StatusCode(), string(res.Body)}
}
