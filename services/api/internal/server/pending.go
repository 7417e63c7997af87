package server

import (
	"context"
	"errors"

	"github.com/capstan-run/capstan/pkg/api"
)

// errPending answers the routes whose handlers are being written.
var errPending = errors.New("not implemented yet")

// AppendAttemptLogs is not implemented yet.
func (h *Handlers) AppendAttemptLogs(context.Context, api.AppendAttemptLogsRequestObject) (api.AppendAttemptLogsResponseObject, error) {
	return nil, errPending
}
