package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"math"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
)

// CreateRun validates the spec, records the run and its root action, and asks
// the scheduler to start it. A spec that can never run is refused with 422
// naming each offending field; nothing is written for it.
func (h *Handlers) CreateRun(ctx context.Context, req api.CreateRunRequestObject) (api.CreateRunResponseObject, error) {
	spec, fieldErrs := decodeSpec(req.Body.Spec)
	name := ""
	if req.Body.Name != nil {
		name = *req.Body.Name
		if !domain.ValidName(name) {
			fieldErrs = append(fieldErrs, problem.FieldError{Field: "name",
				Message: "must be 1-63 characters of [a-z0-9-] starting and ending with a letter or digit"})
		}
	} else {
		name = newRunName()
	}
	if len(fieldErrs) > 0 {
		return api.CreateRun422ApplicationProblemPlusJSONResponse(apiProblem(http.StatusUnprocessableEntity,
			problem.CodeInvalidSpec, fieldErrs[0].Field+": "+fieldErrs[0].Message, fieldErrs...)), nil
	}
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: name}
	nr := store.NewRun{Key: key, Spec: spec}
	if req.Params.IdempotencyKey != nil {
		nr.IdempotencyKey = *req.Params.IdempotencyKey
	}
	detail, created, err := h.store.CreateRun(ctx, nr)
	if errors.Is(err, store.ErrConflict) {
		return api.CreateRun409ApplicationProblemPlusJSONResponse(apiProblem(http.StatusConflict, problem.CodeConflict,
			"a run named "+name+" already exists in "+req.Project+"/"+req.Domain)), nil
	}
	if err != nil {
		return nil, err
	}
	key.Run = detail.Run.Name
	if err := h.queue.Enqueue(ctx, queue.NewRunStartTask(key)); err != nil {
		// The run is recorded; the scheduler's resync starts it.
		h.log.Warn("enqueue run start failed", "run", key.String(), "err", err)
	}
	if !created {
		return api.CreateRun200JSONResponse(toRun(detail)), nil
	}
	return api.CreateRun201JSONResponse(toRun(detail)), nil
}

// decodeSpec converts the API spec to the domain's, normalizes and validates it.
func decodeSpec(in api.WorkflowSpec) (domain.WorkflowSpec, []problem.FieldError) {
	var spec domain.WorkflowSpec
	raw, err := json.Marshal(in)
	if err == nil {
		err = json.Unmarshal(raw, &spec)
	}
	if err != nil {
		return spec, []problem.FieldError{{Field: "spec", Message: err.Error()}}
	}
	spec.Normalize()
	var out []problem.FieldError
	for _, e := range spec.Validate("spec") {
		out = append(out, problem.FieldError{Field: e.Field, Message: e.Message})
	}
	return spec, out
}

// newRunName returns "r" and 12 random characters of [a-z0-9].
func newRunName() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 13)
	_, _ = rand.Read(b)
	b[0] = 'r'
	for i := 1; i < len(b); i++ {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// ListRuns returns a page of runs, newest first.
func (h *Handlers) ListRuns(ctx context.Context, req api.ListRunsRequestObject) (api.ListRunsResponseObject, error) {
	f := store.RunFilter{Project: req.Project, Domain: req.Domain}
	if req.Params.Phase != nil {
		f.Phase = string(*req.Params.Phase)
	}
	if req.Params.Cursor != nil {
		f.Cursor = *req.Params.Cursor
	}
	if req.Params.Limit != nil {
		f.Limit = *req.Params.Limit
	}
	runs, next, err := h.store.ListRuns(ctx, f)
	if errors.Is(err, store.ErrBadCursor) {
		return api.ListRuns400ApplicationProblemPlusJSONResponse{ProblemApplicationProblemPlusJSONResponse: badCursor()}, nil
	}
	if err != nil {
		return nil, err
	}
	out := api.RunList{Runs: make([]api.RunSummary, len(runs))}
	for i, r := range runs {
		out.Runs[i] = toRunSummary(r)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return api.ListRuns200JSONResponse(out), nil
}

// GetRun returns a run with its actions, tasks and attempts.
func (h *Handlers) GetRun(ctx context.Context, req api.GetRunRequestObject) (api.GetRunResponseObject, error) {
	d, err := h.store.GetRun(ctx, domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run})
	if errors.Is(err, store.ErrNotFound) {
		return api.GetRun404ApplicationProblemPlusJSONResponse{ProblemApplicationProblemPlusJSONResponse: notFound("run " + req.Run)}, nil
	}
	if err != nil {
		return nil, err
	}
	return api.GetRun200JSONResponse(toRun(d)), nil
}

// GetAction returns one action with its tasks and attempt history.
func (h *Handlers) GetAction(ctx context.Context, req api.GetActionRequestObject) (api.GetActionResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}.Action(req.Action)
	d, err := h.store.GetAction(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return api.GetAction404ApplicationProblemPlusJSONResponse{ProblemApplicationProblemPlusJSONResponse: notFound("action " + key.String())}, nil
	}
	if err != nil {
		return nil, err
	}
	return api.GetAction200JSONResponse(toAction(d)), nil
}

// GetAttemptLogs returns one attempt's captured output. Task indexes and
// attempt numbers are Postgres integers: a larger one names no attempt (404).
func (h *Handlers) GetAttemptLogs(ctx context.Context, req api.GetAttemptLogsRequestObject) (api.GetAttemptLogsResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}.Action(req.Action)
	if req.Task > math.MaxInt32 || req.Attempt > math.MaxInt32 {
		return api.GetAttemptLogs404ApplicationProblemPlusJSONResponse{ProblemApplicationProblemPlusJSONResponse: notFound("attempt")}, nil
	}
	l, err := h.store.GetAttemptLogs(ctx, key, req.Task, req.Attempt)
	if errors.Is(err, store.ErrNotFound) {
		return api.GetAttemptLogs404ApplicationProblemPlusJSONResponse{ProblemApplicationProblemPlusJSONResponse: notFound("attempt")}, nil
	}
	if err != nil {
		return nil, err
	}
	return api.GetAttemptLogs200JSONResponse{Stdout: l.Stdout, Stderr: l.Stderr, Truncated: l.Truncated}, nil
}
