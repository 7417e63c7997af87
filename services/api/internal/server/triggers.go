package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/store"
)

// CreateTrigger subscribes a template to an event key (Hatchet's event
// triggers): 201 with the trigger; 422 naming each field when the filter
// does not compile or is not a boolean, a param mapping does not compile,
// the workflow (or its version) does not exist, or the mappings do not
// fit its params (an undeclared name, a required param unmapped); 409
// when the name is taken. Nothing is stored on a refusal.
func (h *Handlers) CreateTrigger(ctx context.Context, req api.CreateTriggerRequestObject) (api.CreateTriggerResponseObject, error) {
	b := req.Body
	filter, params := deref(b.Filter), deref(b.Params)
	_, fieldErrs := domain.CompileTrigger(filter, params, "")
	t, _, errs, err := h.template(ctx, req.Project, req.Domain, b.Workflow, nil)
	if err != nil {
		return nil, err
	}
	fieldErrs = append(fieldErrs, errs...)
	if len(errs) == 0 {
		fieldErrs = append(fieldErrs, domain.TriggerParamsProblems(t.Spec.Params, params, "params")...)
	}
	if len(fieldErrs) > 0 {
		return asUnprocessable[api.CreateTrigger422ApplicationProblemPlusJSONResponse](invalidProblem(fieldErrs)), nil
	}
	row, err := h.store.Triggers().CreateTrigger(ctx, store.Trigger{Project: req.Project, Domain: req.Domain,
		Name: b.Name, EventKey: b.EventKey, WorkflowName: b.Workflow.Name, WorkflowVersion: b.Workflow.Version,
		Filter: filter, Params: params})
	taken := subject{kind: "trigger", name: b.Name, in: req.Project + "/" + req.Domain}
	if p, ok := problemFor(err, taken); ok && p.Status == http.StatusConflict {
		return asConflict[api.CreateTrigger409ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("create trigger %s/%s/%s: %w", req.Project, req.Domain, b.Name, err)
	}
	return api.CreateTrigger201JSONResponse(toTrigger(row)), nil
}

// invalidProblem is the 422 invalid_request problem naming fieldErrs (at
// least one), sorted by field.
func invalidProblem(fieldErrs []domain.FieldError) api.Problem {
	slices.SortStableFunc(fieldErrs, func(a, b domain.FieldError) int { return strings.Compare(a.Field, b.Field) })
	return apiProblem(http.StatusUnprocessableEntity, problem.CodeInvalid,
		fieldErrs[0].Field+": "+fieldErrs[0].Message, fieldErrs...)
}

// ListTriggers returns a page of triggers by name.
func (h *Handlers) ListTriggers(ctx context.Context, req api.ListTriggersRequestObject) (api.ListTriggersResponseObject, error) {
	ts, next, err := h.store.Triggers().ListTriggers(ctx, req.Project, req.Domain, deref(req.Params.Cursor),
		deref(req.Params.Limit))
	if p, ok := problemFor(err, subject{}); ok && p.Status == http.StatusBadRequest {
		return asBadRequest[api.ListTriggers400ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("list triggers of %s/%s: %w", req.Project, req.Domain, err)
	}
	out := api.TriggerList{Triggers: make([]api.Trigger, len(ts))}
	for i, t := range ts {
		out.Triggers[i] = toTrigger(t)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return api.ListTriggers200JSONResponse(out), nil
}

// GetTrigger returns one trigger.
func (h *Handlers) GetTrigger(ctx context.Context, req api.GetTriggerRequestObject) (api.GetTriggerResponseObject, error) {
	t, err := h.store.Triggers().GetTrigger(ctx, store.TriggerKey{Project: req.Project, Domain: req.Domain, Name: req.Trigger})
	if p, ok := problemFor(err, subject{kind: "trigger", name: req.Trigger}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.GetTrigger404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read trigger %s: %w", req.Trigger, err)
	}
	return api.GetTrigger200JSONResponse(toTrigger(t)), nil
}

// DeleteTrigger deletes a trigger; events published later start nothing
// through it (runs it started are untouched).
func (h *Handlers) DeleteTrigger(ctx context.Context, req api.DeleteTriggerRequestObject) (api.DeleteTriggerResponseObject, error) {
	err := h.store.Triggers().DeleteTrigger(ctx, store.TriggerKey{Project: req.Project, Domain: req.Domain, Name: req.Trigger})
	if p, ok := problemFor(err, subject{kind: "trigger", name: req.Trigger}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.DeleteTrigger404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("delete trigger %s: %w", req.Trigger, err)
	}
	return api.DeleteTrigger204Response{}, nil
}

// toTrigger is t as the API shows it.
func toTrigger(t store.Trigger) api.Trigger {
	out := api.Trigger{Name: t.Name, EventKey: t.EventKey, CreatedAt: t.CreatedAt, Params: t.Params,
		Workflow: api.WorkflowRef{Name: t.WorkflowName, Version: t.WorkflowVersion}}
	if out.Params == nil {
		out.Params = map[string]string{}
	}
	if t.Filter != "" {
		out.Filter = &t.Filter
	}
	return out
}
