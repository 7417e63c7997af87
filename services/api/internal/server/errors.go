package server

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/labstack/echo/v4"
)

// errorHandler renders every error that reaches echo as problem+json: route
// and binding errors with their status, anything unexpected as a 500 whose
// detail is logged, not sent.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var p problem.Problem
		var he *echo.HTTPError
		switch {
		case errors.As(err, &p):
		case errors.As(err, &he):
			p = problem.New(he.Code, codeFor(he.Code), httpErrorDetail(he))
		default:
			log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
			p = problem.New(http.StatusInternalServerError, problem.CodeInternal, "internal error")
		}
		p.Instance = c.Request().URL.Path
		problem.Write(c.Response(), p)
	}
}

func httpErrorDetail(he *echo.HTTPError) string {
	if s, ok := he.Message.(string); ok {
		return s
	}
	if he.Internal != nil {
		return he.Internal.Error()
	}
	return http.StatusText(he.Code)
}

func codeFor(status int) string {
	switch status {
	case http.StatusNotFound:
		return problem.CodeNotFound
	case http.StatusMethodNotAllowed:
		return problem.CodeNotAllowed
	case http.StatusRequestEntityTooLarge:
		return problem.CodeTooLarge
	case http.StatusUnsupportedMediaType:
		return problem.CodeUnsupported
	case http.StatusConflict:
		return problem.CodeConflict
	case http.StatusServiceUnavailable:
		return problem.CodeUnavailable
	case http.StatusUnauthorized:
		return problem.CodeUnauthorized
	}
	if status >= 500 {
		return problem.CodeInternal
	}
	return problem.CodeBadRequest
}

// apiProblem converts a problem into the generated response type.
func apiProblem(status int, code, detail string, errs ...problem.FieldError) api.Problem {
	p := problem.New(status, code, detail, errs...)
	out := api.Problem{Type: p.Type, Title: p.Title, Status: p.Status, Code: p.Code, Detail: &p.Detail}
	if len(errs) > 0 {
		fe := make([]api.FieldError, len(errs))
		for i, e := range errs {
			fe[i] = api.FieldError{Field: e.Field, Message: e.Message}
		}
		out.Errors = &fe
	}
	return out
}

func notFound(what string) api.ProblemApplicationProblemPlusJSONResponse {
	return api.ProblemApplicationProblemPlusJSONResponse(apiProblem(http.StatusNotFound, problem.CodeNotFound, what+" not found"))
}
