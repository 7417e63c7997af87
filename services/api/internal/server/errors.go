package server

import (
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/problem"
)

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

// badCursor is the 400 of a list whose cursor the API did not hand out.
func badCursor() api.ProblemApplicationProblemPlusJSONResponse {
	const msg = "not a cursor from this API"
	return api.ProblemApplicationProblemPlusJSONResponse(apiProblem(http.StatusBadRequest, problem.CodeInvalid,
		"cursor: "+msg, problem.FieldError{Field: "cursor", Message: msg}))
}
