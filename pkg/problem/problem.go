// Package problem writes RFC 9457 application/problem+json errors with a
// stable machine-readable code, for every Capstan HTTP server.
package problem

import (
	"encoding/json"
	"net/http"

	"github.com/capstan-run/capstan/pkg/domain"
)

// ContentType is the media type of a problem.
const ContentType = "application/problem+json"

// Stable problem codes.
const (
	CodeBadRequest   = "bad_request"
	CodeInvalidSpec  = "invalid_spec"
	CodeInvalid      = "invalid_request"
	CodeNotFound     = "not_found"
	CodeConflict     = "conflict"
	CodeTerminal     = "already_terminal"
	CodeInternal     = "internal"
	CodeUnavailable  = "unavailable"
	CodeUnsupported  = "unsupported_media_type"
	CodeNotAllowed   = "method_not_allowed"
	CodeTooLarge     = "request_too_large"
	CodeUnauthorized = "unauthorized"
	// CodeForbidden: the token's role may not call the operation.
	CodeForbidden = "forbidden"
	// CodeRateLimited: the token (or address) sent more requests than its
	// rate limit; retry after a second.
	CodeRateLimited = "rate_limited"
	// CodeNotWaiting: an approve or a reject of anything but an approval
	// step waiting for its decision.
	CodeNotWaiting = "not_waiting_for_approval"
	// CodeNotRestartable: a restart of a run not in a terminal failure phase.
	CodeNotRestartable = "not_restartable"
	// CodeNotTerminal: a delete of a run that, or whose descendant or
	// parent run, has not ended.
	CodeNotTerminal = "not_terminal"
	// CodeAbortPending: a restart while an abort of the run is still being
	// delivered.
	CodeAbortPending = "abort_pending"
	// CodeArchiveUnavailable: the archive (CAPSTAN_ARCHIVE_URL) could not
	// be written or read; a delete that needed it deleted nothing.
	CodeArchiveUnavailable = "archive_unavailable"
	// CodeAttemptNotFound: an executor holds no live attempt of that id (its
	// abort API's 404): the attempt's process is gone.
	CodeAttemptNotFound = "attempt_not_found"
)

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type     string              `json:"type"`
	Title    string              `json:"title"`
	Status   int                 `json:"status"`
	Detail   string              `json:"detail,omitempty"`
	Instance string              `json:"instance,omitempty"`
	Code     string              `json:"code"`
	Errors   []domain.FieldError `json:"errors,omitempty"`
}

// New builds a problem; its type is "about:blank" style "/problems/<code>";
// errs name the offending fields, each as validation reported it.
func New(status int, code, detail string, errs ...domain.FieldError) Problem {
	return Problem{Type: "/problems/" + code, Title: http.StatusText(status), Status: status, Detail: detail,
		Code: code, Errors: errs}
}

// Error renders the detail.
func (p Problem) Error() string { return p.Code + ": " + p.Detail }

// Write sends p as application/problem+json.
func Write(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
