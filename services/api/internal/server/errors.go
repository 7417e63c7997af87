package server

import (
	"cmp"
	"errors"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/archive"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/store"
)

// storeProblem is how the API answers one store or domain sentinel.
type storeProblem struct {
	err    error  // the sentinel, matched with errors.Is
	status int    // the HTTP status
	code   string // the stable problem code
	field  string // the request field at fault, named in errors and leading the detail; "" for none
	detail func(s subject) string
}

// storeProblems is every store or domain sentinel a handler answers with a
// problem, checked in order; any other error is the handler's error, a
// 500. A new sentinel is mapped here, once: each handler turns the problem
// into the generated response of its status.
var storeProblems = []storeProblem{
	{err: store.ErrNotFound, status: http.StatusNotFound, code: problem.CodeNotFound,
		detail: func(s subject) string { return s.String() + " not found" }},
	{err: store.ErrConflict, status: http.StatusConflict, code: problem.CodeConflict,
		detail: func(s subject) string { return "a " + s.kind + " named " + s.name + " already exists in " + s.in }},
	{err: store.ErrTerminal, status: http.StatusConflict, code: problem.CodeTerminal,
		detail: func(s subject) string { return s.String() + " has already ended; nothing to " + cmp.Or(s.op, "abort") }},
	{err: store.ErrNotTerminal, status: http.StatusConflict, code: problem.CodeNotTerminal,
		detail: func(s subject) string {
			return s.String() + " cannot be deleted: " + s.blocker + "; a run is deleted once it, its child runs and its parent run have ended"
		}},
	{err: domain.ErrNotWaiting, status: http.StatusConflict, code: problem.CodeNotWaiting,
		detail: func(s subject) string { return s.String() + " is not an approval step waiting for a decision" }},
	{err: store.ErrNotRestartable, status: http.StatusConflict, code: problem.CodeNotRestartable,
		detail: func(s subject) string {
			return s.String() + " is not in a terminal failure phase (FAILED, ABORTED, TIMED_OUT, UNSCHEDULABLE, WORKER_FAILED)"
		}},
	{err: store.ErrAbortPending, status: http.StatusConflict, code: problem.CodeAbortPending,
		detail: func(s subject) string {
			return "an abort of " + s.String() + " is still being delivered; " + cmp.Or(s.op, "restart") + " it once delivered"
		}},
	{err: store.ErrUnknownStep, status: http.StatusUnprocessableEntity, code: problem.CodeInvalid, field: "from_step",
		detail: func(s subject) string { return "names no step of " + s.String() }},
	{err: store.ErrBadReport, status: http.StatusConflict, code: problem.CodeConflict,
		detail: func(s subject) string {
			return "state " + s.state + " cannot follow the " + s.kind + "'s current state"
		}},
	{err: archive.ErrNotFound, status: http.StatusNotFound, code: problem.CodeNotFound,
		detail: func(s subject) string { return s.String() + " is not archived" }},
	{err: store.ErrBadCursor, status: http.StatusBadRequest, code: problem.CodeInvalid, field: "cursor",
		detail: func(subject) string { return "not a cursor from this API" }},
}

// subject is what a request asked the store about, as a problem's detail
// names it.
type subject struct {
	kind  string // "run", "action", "attempt", "worker"
	name  string // "r1", "demo/dev/r1/a0", a worker's id; "" when the detail names only the kind
	in    string // where a new one was to be created, "demo/dev" (ErrConflict)
	state string // the state an executor reported, "RUNNING" (ErrBadReport)
	op    string // what was asked: "suspend" (ErrTerminal; "" for abort), "delete" (ErrAbortPending; "" for restart)
	// blocker is the run a delete found not ended, "run r1-w-0 is RUNNING"
	// (ErrNotTerminal).
	blocker string
}

// String is "kind name", or the kind alone.
func (s subject) String() string {
	if s.name == "" {
		return s.kind
	}
	return s.kind + " " + s.name
}

// problemFor is the problem that answers err about s when err is, or wraps,
// a sentinel of storeProblems; false for nil and for any other error.
func problemFor(err error, s subject) (api.Problem, bool) {
	if err == nil {
		return api.Problem{}, false
	}
	for _, sp := range storeProblems {
		if !errors.Is(err, sp.err) {
			continue
		}
		detail := sp.detail(s)
		if sp.field == "" {
			return apiProblem(sp.status, sp.code, detail), true
		}
		return apiProblem(sp.status, sp.code, sp.field+": "+detail,
			domain.FieldError{Field: sp.field, Message: detail}), true
	}
	return api.Problem{}, false
}

// The shapes oapi-codegen gives a status an operation declares through
// components/responses: a struct embedding the shared response of that
// status. The as* functions turn a problem into such an operation's response.
type (
	badRequest interface {
		~struct {
			api.BadRequestApplicationProblemPlusJSONResponse
		}
	}
	notFound interface {
		~struct {
			api.NotFoundApplicationProblemPlusJSONResponse
		}
	}
	conflict interface {
		~struct {
			api.ConflictApplicationProblemPlusJSONResponse
		}
	}
	unprocessable interface {
		~struct {
			api.UnprocessableEntityApplicationProblemPlusJSONResponse
		}
	}
	unavailable interface {
		~struct {
			api.ServiceUnavailableApplicationProblemPlusJSONResponse
		}
	}
)

// asBadRequest is p as an operation's 400 response R.
func asBadRequest[R badRequest](p api.Problem) R {
	return R{api.BadRequestApplicationProblemPlusJSONResponse(p)}
}

// asNotFound is p as an operation's 404 response R.
func asNotFound[R notFound](p api.Problem) R {
	return R{api.NotFoundApplicationProblemPlusJSONResponse(p)}
}

// asConflict is p as an operation's 409 response R.
func asConflict[R conflict](p api.Problem) R {
	return R{api.ConflictApplicationProblemPlusJSONResponse(p)}
}

// asUnprocessable is p as an operation's 422 response R.
func asUnprocessable[R unprocessable](p api.Problem) R {
	return R{api.UnprocessableEntityApplicationProblemPlusJSONResponse(p)}
}

// asUnavailable is p as an operation's 503 response R.
func asUnavailable[R unavailable](p api.Problem) R {
	return R{api.ServiceUnavailableApplicationProblemPlusJSONResponse(p)}
}

// apiProblem converts a problem into the generated response type.
func apiProblem(status int, code, detail string, errs ...domain.FieldError) api.Problem {
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
