package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/labstack/echo/v4"
)

// validator checks every request that matches an operation of spec (what
// servedSpec merges: openapi/capstan.yaml and openapi/worker.yaml) against
// it: first its security (the bearer scheme, through kin-openapi's
// AuthenticationFunc: auth.authorize), then its parameters, content type
// and body schema, answering 400 problem+json naming each offending field. The principal goes into the request's
// context for the handlers. A request that matches no operation is
// answered by outsideSpec, which denies by default.
func validator(spec *openapi3.T, auth *authenticator) echo.MiddlewareFunc {
	router, err := newSpecRouter(spec)
	if err != nil {
		panic(fmt.Sprintf("OpenAPI router: %v", err))
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			route, params, err := router.FindRoute(req)
			if err != nil {
				return outsideSpec(c, auth, err, next)
			}
			who, err := authorizeRoute(req, route, params, auth)
			if err != nil {
				return authProblem(c, err)
			}
			req = req.WithContext(context.WithValue(req.Context(), principalKey{}, who))
			c.SetRequest(req)
			return validateRoute(c, route, params, next)
		}
	}
}

// authorizeRoute runs the operation's security requirements (the spec's
// global bearer, or the operation's own) with auth.authorize as the
// AuthenticationFunc and returns the principal it accepted.
func authorizeRoute(req *http.Request, route *routers.Route, params map[string]string, auth *authenticator) (principal, error) {
	security := route.Spec.Security
	if route.Operation.Security != nil {
		security = *route.Operation.Security
	}
	var who principal
	opts := &openapi3filter.Options{AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
		return auth.authorize(in, func(p principal) { who = p })
	}}
	// Hide the body: kin-openapi would read it all for the hook, and an
	// unauthenticated client must not make the api read a body.
	body := req.Body
	req.Body = http.NoBody
	defer func() { req.Body = body }()
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateSecurityRequirements(req.Context(), in, security); err != nil {
		var se *openapi3filter.SecurityRequirementsError
		if errors.As(err, &se) && len(se.Errors) == 1 {
			return principal{}, se.Errors[0]
		}
		return principal{}, err
	}
	return who, nil
}

// init has kin-openapi's schema errors leave out the schema and the value
// they are about (openapi3.SchemaErrorDetailsDisabled, a process-wide
// setting, set before any server reads it). An allOf's error writes its
// causes' messages when it is made, and each writes the value it is about
// as indented JSON: for a value nested n deep, n lines of up to 2n spaces.
// A 20 KB body of 9,000 nested arrays in a field that is an allOf (a
// report batch's heartbeat) had the api allocate 1.9 GB and spend 2 s of
// CPU before its 400. The problems name fields from the errors' Reason
// and path (collect), never from those details.
func init() { openapi3.SchemaErrorDetailsDisabled = true }

// validateRoute checks the request's parameters and body against route.
func validateRoute(c echo.Context, route *routers.Route, params map[string]string, next echo.HandlerFunc) error {
	req := c.Request()
	var raw []byte // the body as sent: validation may rewrite it
	var err error
	if route.Operation.RequestBody != nil {
		if raw, err = readBody(req); err != nil {
			return requestProblem(err)
		}
	}
	opts := &openapi3filter.Options{MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
		return requestProblem(err)
	}
	if err := rejectTrailing(raw); err != nil {
		return err
	}
	if err := rejectNUL(raw); err != nil {
		return err
	}
	return next(c)
}

// outsideSpec answers a request that matches no operation of the spec
// (routeErr is FindRoute's), by the route echo matched (c.Path()): a
// public route (publicRoute) is served to anyone; an operator route
// (adminRoute) only to an admin token; anything else needs a valid token
// and is then answered 405 (another method serves the path, by echo's
// routes or the spec's) or 404, never handed to a handler: every other
// route of the server is an operation of the spec, which a request
// reaches only through authorizeRoute and validateRoute.
func outsideSpec(c echo.Context, auth *authenticator, routeErr error, next echo.HandlerFunc) error {
	if publicRoute(c.Path()) {
		return next(c)
	}
	req := c.Request()
	p, err := auth.authenticate(req)
	admin := adminRoute(c.Path())
	if err == nil && admin && p.role != RoleAdmin {
		err = errForbidden
	}
	if err != nil {
		return authProblem(c, err)
	}
	if !admin {
		allow, routed := c.Get(echo.ContextKeyHeaderAllow).(string) // echo knows the path, not the method
		if routed {
			c.Response().Header().Set(echo.HeaderAllow, allow)
		}
		if routed || errors.Is(routeErr, routers.ErrMethodNotAllowed) {
			return echo.ErrMethodNotAllowed
		}
		return echo.ErrNotFound
	}
	c.SetRequest(req.WithContext(context.WithValue(req.Context(), principalKey{}, p)))
	return next(c)
}

// requestProblem turns kin-openapi's validation errors into one problem.
func requestProblem(err error) error {
	var fields []domain.FieldError
	collect(err, &fields)
	status := http.StatusBadRequest
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return echo.ErrStatusRequestEntityTooLarge
	}
	for _, f := range fields {
		if f.Field == "Content-Type" {
			status = http.StatusUnsupportedMediaType
		}
	}
	code := problem.CodeInvalid
	if status == http.StatusUnsupportedMediaType {
		code = problem.CodeUnsupported
	}
	detail := "the request does not match the API"
	if len(fields) > 0 {
		detail = fields[0].Field + ": " + fields[0].Message
	}
	return problem.New(status, code, detail, fields...)
}

func collect(err error, out *[]domain.FieldError) {
	switch e := err.(type) {
	case openapi3.MultiError:
		for _, inner := range e {
			collect(inner, out)
		}
	case *openapi3filter.RequestError:
		collectRequest(e, out)
	case *openapi3.SchemaError:
		*out = append(*out, domain.FieldError{Field: jsonPath("body", e.JSONPointer()), Message: e.Reason})
	default:
		*out = append(*out, domain.FieldError{Field: "request", Message: err.Error()})
	}
}

func collectRequest(reqErr *openapi3filter.RequestError, out *[]domain.FieldError) {
	prefix := "body"
	switch {
	case reqErr.Parameter != nil:
		prefix = reqErr.Parameter.Name
	case reqErr.RequestBody != nil && strings.Contains(reqErr.Reason, "header Content-Type"):
		*out = append(*out, domain.FieldError{Field: "Content-Type", Message: reqErr.Reason})
		return
	}
	if multi, ok := reqErr.Err.(openapi3.MultiError); ok {
		for _, e := range multi {
			*out = append(*out, schemaField(prefix, e, reqErr))
		}
		return
	}
	*out = append(*out, schemaField(prefix, reqErr.Err, reqErr))
}

func schemaField(prefix string, err error, reqErr *openapi3filter.RequestError) domain.FieldError {
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		return domain.FieldError{Field: jsonPath(prefix, se.JSONPointer()), Message: se.Reason}
	}
	msg := reqErr.Reason
	if err != nil {
		msg = strings.TrimSpace(strings.TrimPrefix(err.Error(), "request body has an error: "))
	}
	if msg == "" {
		msg = reqErr.Error()
	}
	return domain.FieldError{Field: prefix, Message: msg}
}

// jsonPath renders a JSON pointer as "body.spec.steps[1].plugin" ("spec..."
// for bodies, the parameter name for parameters).
func jsonPath(prefix string, pointer []string) string {
	var b strings.Builder
	if prefix != "body" {
		b.WriteString(prefix)
	}
	for _, p := range pointer {
		if p != "" && strings.Trim(p, "0123456789") == "" {
			b.WriteString("[" + p + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	if b.Len() == 0 {
		return prefix
	}
	return b.String()
}

// readBody reads the request's body and puts it back for the next reader.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	raw, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(raw))
	return raw, nil
}

// rejectTrailing refuses a body holding more than one JSON document, such
// as {"reason":"x"}x (400): validation and the handler's decoder read the
// first and drop the rest unseen. Whitespace may follow.
func rejectTrailing(raw []byte) error {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var first json.RawMessage
	if dec.Decode(&first) != nil {
		return nil // not JSON: the handler's decoding answers it
	}
	if _, err := dec.Token(); errors.Is(err, io.EOF) {
		return nil
	}
	const msg = "unexpected data after the JSON document"
	return problem.New(http.StatusBadRequest, problem.CodeInvalid, "body: "+msg,
		domain.FieldError{Field: "body", Message: msg})
}

// rejectNUL refuses a JSON body with U+0000 in a string or a key (400 naming
// the field): Postgres stores it in neither text nor jsonb, so it would
// otherwise fail the insert with a 500, and no name, command or log line
// needs it (the executor strips NUL from output). In valid JSON a NUL can
// only be written as the escape \u0000.
func rejectNUL(raw []byte) error {
	if !bytes.Contains(raw, []byte(`\u0000`)) {
		return nil
	}
	var v any // the first document, as the handler's binder reads it
	if json.NewDecoder(bytes.NewReader(raw)).Decode(&v) != nil {
		return nil // not JSON: the handler's decoding answers it
	}
	field, found := findNUL(v)
	if !found {
		return nil
	}
	const msg = "must not contain the NUL character (U+0000)"
	return problem.New(http.StatusBadRequest, problem.CodeInvalid, jsonPath("body", field)+": "+msg,
		domain.FieldError{Field: jsonPath("body", field), Message: msg})
}

// findNUL returns the JSON pointer (as path segments) of the first string or
// key holding U+0000, in key order.
func findNUL(v any) ([]string, bool) {
	switch x := v.(type) {
	case string:
		return nil, strings.ContainsRune(x, 0)
	case []any:
		for i, e := range x {
			if p, ok := findNUL(e); ok {
				return append([]string{strconv.Itoa(i)}, p...), true
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if strings.ContainsRune(k, 0) {
				return []string{k}, true
			}
			if p, ok := findNUL(x[k]); ok {
				return append([]string{k}, p...), true
			}
		}
	}
	return nil, false
}
