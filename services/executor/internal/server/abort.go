package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/executorapi"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
)

// abortCauses are the causes an abort request may give.
var abortCauses = []workerapi.AttemptReportCause{workerapi.Aborted, workerapi.Timeout, workerapi.Preempted, workerapi.WorkerLost}

// AbortAttempt kills the attempt's process group and answers once it is
// gone: 200 killed=true, or killed=false when it had already exited; 404
// (code attempt_not_found) when this executor holds no such attempt; 400
// for an unknown cause.
func (h *handlers) AbortAttempt(ctx context.Context, req executorapi.AbortAttemptRequestObject) (executorapi.AbortAttemptResponseObject, error) {
	cause, reason := workerapi.Aborted, ""
	if b := req.Body; b != nil {
		if b.Cause != nil && *b.Cause != "" {
			cause = workerapi.AttemptReportCause(*b.Cause)
		}
		if b.Reason != nil {
			reason = *b.Reason
		}
	}
	if !validCause(cause) {
		return nil, problem.New(http.StatusBadRequest, problem.CodeInvalid,
			fmt.Sprintf("cause %q: want one of %v", cause, abortCauses))
	}
	killed, err := h.ab.Abort(ctx, req.Id, cause, reason)
	if errors.Is(err, supervisor.ErrNotHeld) {
		return executorapi.AbortAttempt404ApplicationProblemPlusJSONResponse(problemOf(problem.New(
			http.StatusNotFound, problem.CodeAttemptNotFound, fmt.Sprintf("this executor holds no attempt %d", req.Id)))), nil
	}
	if err != nil {
		h.log.Error("abort failed", "attempt_id", req.Id, "err", err)
		return executorapi.AbortAttempt500ApplicationProblemPlusJSONResponse(problemOf(problem.New(
			http.StatusInternalServerError, problem.CodeInternal, fmt.Sprintf("kill attempt %d: %v", req.Id, err)))), nil
	}
	h.log.Info("attempt aborted", "attempt_id", req.Id, "cause", cause, "killed", killed)
	return executorapi.AbortAttempt200JSONResponse{Id: req.Id, Killed: killed}, nil
}

func validCause(c workerapi.AttemptReportCause) bool {
	for _, ok := range abortCauses {
		if c == ok {
			return true
		}
	}
	return false
}
