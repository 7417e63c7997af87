package server

import (
	"github.com/capstan-run/capstan/pkg/executorapi"
	"github.com/capstan-run/capstan/pkg/problem"
)

// problemOf converts a problem to the generated type.
func problemOf(p problem.Problem) executorapi.Problem {
	return executorapi.Problem{Type: p.Type, Title: p.Title, Status: p.Status, Detail: &p.Detail, Code: p.Code}
}
