package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
)

var _ supervisor.LogSink = (*Client)(nil)

// AppendLogs ships chunks of attempt id's output, in order. Once the
// executor is registered they travel with its reports (see Report), in the
// order they were made, so an attempt's output lands before its final
// report; before, alone (POST /v1/attempts/{id}/logs) without retrying: the
// caller retries at its next batch. Errors: a 4xx answer (the attempt is
// gone, the chunks are invalid) wraps supervisor.ErrLogsRejected and
// ErrRejected; a transport error or a 5xx is worth a retry.
func (c *Client) AppendLogs(ctx context.Context, id int64, chunks []workerapi.LogChunk) error {
	if c.worker.Load() != nil {
		_, err := c.enqueue(ctx, workerapi.BatchedReport{AttemptId: id, Logs: &chunks})
		if errors.Is(err, ErrRejected) {
			return fmt.Errorf("%w: %w", supervisor.ErrLogsRejected, err)
		}
		return err
	}
	res, err := c.api.AppendAttemptLogsWithResponse(ctx, id, workerapi.LogChunks{Chunks: chunks})
	switch {
	case err != nil:
		return fmt.Errorf("append logs: %w", err)
	case res.StatusCode() == http.StatusNoContent:
		return nil
	}
	serr := &StatusError{"append logs", res.StatusCode(), string(res.Body)}
	if res.StatusCode() >= 400 && res.StatusCode() < 500 {
		return fmt.Errorf("%w: %w", supervisor.ErrLogsRejected, serr)
	}
	return serr
}
