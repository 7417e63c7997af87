package problem

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"
)

// EchoErrorHandler renders every error that reaches echo as problem+json: a
// Problem as is, an echo.HTTPError (no route, bad parameter, bad body, body
// too large) with its status, anything else as a 500 whose detail is logged,
// never sent.
func EchoErrorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		p := FromError(err, log)
		p.Instance = c.Request().URL.Path
		Write(c.Response(), p)
	}
}

// FromError converts err to a Problem (see EchoErrorHandler).
func FromError(err error, log *slog.Logger) Problem {
	var p Problem
	if errors.As(err, &p) {
		return p
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg, _ := he.Message.(string)
		if msg == "" {
			msg = http.StatusText(he.Code)
		}
		if he.Internal != nil {
			msg += ": " + he.Internal.Error()
		}
		return New(he.Code, CodeForStatus(he.Code), msg)
	}
	log.Error("request failed", "err", err)
	return New(http.StatusInternalServerError, CodeInternal, "internal error")
}

// CodeForStatus is the stable code of a problem that has only a status.
func CodeForStatus(status int) string {
	switch status {
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusMethodNotAllowed:
		return CodeNotAllowed
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusUnsupportedMediaType:
		return CodeUnsupported
	case http.StatusConflict:
		return CodeConflict
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusTooManyRequests:
		return CodeRateLimited
	}
	if status >= 500 {
		return CodeInternal
	}
	return CodeBadRequest
}
