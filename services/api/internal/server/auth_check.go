package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/labstack/echo/v4"
)

// More errors of authorization, answered by authProblem.
var (
	// errOtherProject: the token is scoped to other projects; answered 404
	// like a missing object, so that names do not leak.
	errOtherProject = errors.New("not found")
	// errNotHolder: a worker token asks about a worker or an attempt of
	// another worker.
	errNotHolder = errors.New("only the worker holding it may call this route")
)

// checkHolder enforces an operation's x-capstan-holder: "worker" routes
// (/v1/workers/{id}/…) only for the token minted for worker id, "attempt"
// routes (/v1/attempts/{id}/…) only for the token of the worker the attempt
// is assigned to. Admin passes; an unknown attempt is left to the handler's
// 404. An attempt it reads (with its task and action, in one statement) is
// kept in p.attempt: the executor's first request about an attempt reads it
// (GET /v1/attempts/{id}), and its handler reuses the rows.
func (a *authenticator) checkHolder(rvi *openapi3filter.RequestValidationInput, p *principal) error {
	holder, _ := rvi.Route.Operation.Extensions["x-capstan-holder"].(string)
	if holder == "" || p.role == RoleAdmin {
		return nil
	}
	if p.workerID == "" {
		return errNotHolder
	}
	id := rvi.PathParams["id"]
	switch holder {
	case "worker":
		if !strings.EqualFold(id, p.workerID) {
			return errNotHolder
		}
	case "attempt":
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return nil // the validator answers 400
		}
		worker, ok := a.holders.Get(n)
		if !ok {
			r, err := a.store.Attempts().GetAttemptRun(rvi.Request.Context(), n)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("read the holder of attempt %d: %w", n, err)
			}
			if r.Attempt.WorkerID == nil {
				return errNotHolder
			}
			worker, p.attempt = *r.Attempt.WorkerID, &r
			a.holders.Add(n, worker)
		}
		if !strings.EqualFold(worker, p.workerID) {
			return errNotHolder
		}
	}
	return nil
}

// authProblem turns an authentication or authorization error into its
// answer: 401 (with WWW-Authenticate), 403, 404 or 429 (a token past its
// rate limit, with Retry-After); other errors (the database) pass as they
// are.
func authProblem(c echo.Context, err error) error {
	var limited *rateLimitError
	switch {
	case errors.As(err, &limited):
		return tooManyRequests(c, limited.wait, limited.detail)
	case errors.Is(err, errNoToken), errors.Is(err, errBadToken):
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="capstan"`)
		return problem.New(http.StatusUnauthorized, problem.CodeUnauthorized, err.Error())
	case errors.Is(err, errForbidden), errors.Is(err, errNotHolder):
		return problem.New(http.StatusForbidden, problem.CodeForbidden, err.Error())
	case errors.Is(err, errOtherProject):
		return problem.New(http.StatusNotFound, problem.CodeNotFound, "not found")
	}
	return err
}

// publicRoutes are the routes outside the spec anyone may reach: the
// probes, the dashboard's static files (its API calls carry a token), the
// API description and its reference page.
var publicRoutes = []string{"/healthz", "/readyz", "/", "/ui", "/ui/*", "/openapi.yaml", "/openapi.json", "/docs", "/docs/*"}

// publicRoute reports whether route (echo's, c.Path()) is one of
// publicRoutes.
func publicRoute(route string) bool { return slices.Contains(publicRoutes, route) }

// adminPrefixes are the routes outside the spec only an admin may reach:
// /metrics, the profiler and the queue UI.
var adminPrefixes = []string{"/metrics", PprofPath, QueuesPath}

// adminRoute reports whether route (echo's, c.Path()) is under one of
// adminPrefixes.
func adminRoute(route string) bool {
	for _, p := range adminPrefixes {
		if route == p || strings.HasPrefix(route, p+"/") {
			return true
		}
	}
	return false
}
