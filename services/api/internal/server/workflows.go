package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// PushWorkflow registers a version of a workflow template: 201 with the new
// version, 200 with the latest when the body equals it, 422 naming each
// field of a body that cannot be a template (nothing is stored).
func (h *Handlers) PushWorkflow(ctx context.Context, req api.PushWorkflowRequestObject) (api.PushWorkflowResponseObject, error) {
	b := req.Body
	var spec domain.WorkflowSpec
	var params []domain.Param
	fieldErrs := convertField(b.Spec, &spec, "spec")
	if b.Params != nil {
		fieldErrs = append(fieldErrs, convertField(*b.Params, &params, "params")...)
	}
	var description string
	if b.Description != nil {
		description = *b.Description
	}
	if len(fieldErrs) > 0 {
		return asUnprocessable[api.PushWorkflow422ApplicationProblemPlusJSONResponse](specProblem(fieldErrs)), nil
	}
	t, fieldErrs := domain.NewTemplate(b.Name, description, params, spec)
	if len(fieldErrs) > 0 {
		return asUnprocessable[api.PushWorkflow422ApplicationProblemPlusJSONResponse](specProblem(fieldErrs)), nil
	}
	fieldErrs, err := h.subWorkflowProblems(ctx, req.Project, req.Domain, t.Spec, "spec", t.Name)
	if err != nil {
		return nil, err
	}
	if len(fieldErrs) > 0 {
		return asUnprocessable[api.PushWorkflow422ApplicationProblemPlusJSONResponse](specProblem(fieldErrs)), nil
	}
	row, created, err := h.store.Templates().PushTemplate(ctx, store.Template{Project: req.Project, Domain: req.Domain,
		Name: t.Name, Description: t.Description, Spec: t.Spec, Digest: t.Digest()})
	if err != nil {
		return nil, fmt.Errorf("push workflow %s/%s/%s: %w", req.Project, req.Domain, b.Name, err)
	}
	h.templates.forget(store.TemplateKey{Project: req.Project, Domain: req.Domain, Name: row.Name}, 0)
	if !created {
		return api.PushWorkflow200JSONResponse(toTemplate(row)), nil
	}
	return api.PushWorkflow201JSONResponse(toTemplate(row)), nil
}

// convertField converts in, an API value, to out, its domain twin; the
// error names field.
func convertField(in, out any, field string) []domain.FieldError {
	if err := api.ConvertJSON(in, out); err != nil {
		return []domain.FieldError{{Field: field, Message: err.Error()}}
	}
	return nil
}

// ListWorkflows returns a page of templates, the latest version of each.
func (h *Handlers) ListWorkflows(ctx context.Context, req api.ListWorkflowsRequestObject) (api.ListWorkflowsResponseObject, error) {
	ts, next, err := h.store.Templates().ListTemplates(ctx, req.Project, req.Domain, deref(req.Params.Cursor), deref(req.Params.Limit))
	if p, ok := problemFor(err, subject{}); ok && p.Status == http.StatusBadRequest {
		return asBadRequest[api.ListWorkflows400ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("list workflows of %s/%s: %w", req.Project, req.Domain, err)
	}
	out := api.WorkflowTemplateList{Workflows: make([]api.WorkflowTemplate, len(ts))}
	for i, t := range ts {
		out.Workflows[i] = toTemplate(t)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return api.ListWorkflows200JSONResponse(out), nil
}

// GetWorkflow returns a template's latest version.
func (h *Handlers) GetWorkflow(ctx context.Context, req api.GetWorkflowRequestObject) (api.GetWorkflowResponseObject, error) {
	t, err := h.store.Templates().GetTemplate(ctx, store.TemplateKey{Project: req.Project, Domain: req.Domain, Name: req.Workflow}, 0)
	if p, ok := problemFor(err, subject{kind: "workflow", name: req.Workflow}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.GetWorkflow404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read workflow %s: %w", req.Workflow, err)
	}
	return api.GetWorkflow200JSONResponse(toTemplate(t)), nil
}

// GetWorkflowVersion returns one version of a template.
func (h *Handlers) GetWorkflowVersion(ctx context.Context, req api.GetWorkflowVersionRequestObject) (api.GetWorkflowVersionResponseObject, error) {
	key := store.TemplateKey{Project: req.Project, Domain: req.Domain, Name: req.Workflow}
	t, err := h.store.Templates().GetTemplate(ctx, key, req.Version)
	if p, ok := problemFor(err, subject{kind: "workflow", name: fmt.Sprintf("%s version %d", req.Workflow, req.Version)}); ok &&
		p.Status == http.StatusNotFound {
		return asNotFound[api.GetWorkflowVersion404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read workflow %s version %d: %w", req.Workflow, req.Version, err)
	}
	return api.GetWorkflowVersion200JSONResponse(toTemplate(t)), nil
}

// ListWorkflowVersions returns every version of a template, newest first.
func (h *Handlers) ListWorkflowVersions(ctx context.Context, req api.ListWorkflowVersionsRequestObject) (api.ListWorkflowVersionsResponseObject, error) {
	ts, err := h.store.Templates().ListTemplateVersions(ctx, store.TemplateKey{Project: req.Project, Domain: req.Domain, Name: req.Workflow})
	if p, ok := problemFor(err, subject{kind: "workflow", name: req.Workflow}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.ListWorkflowVersions404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("list versions of workflow %s: %w", req.Workflow, err)
	}
	out := api.WorkflowTemplateList{Workflows: make([]api.WorkflowTemplate, len(ts))}
	for i, t := range ts {
		out.Workflows[i] = toTemplate(t)
	}
	return api.ListWorkflowVersions200JSONResponse(out), nil
}

// DeleteWorkflow stops new runs of a template.
func (h *Handlers) DeleteWorkflow(ctx context.Context, req api.DeleteWorkflowRequestObject) (api.DeleteWorkflowResponseObject, error) {
	key := store.TemplateKey{Project: req.Project, Domain: req.Domain, Name: req.Workflow}
	h.templates.forget(key, 0)
	err := h.store.Templates().DeleteTemplate(ctx, key)
	if p, ok := problemFor(err, subject{kind: "workflow", name: req.Workflow}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.DeleteWorkflow404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("delete workflow %s: %w", req.Workflow, err)
	}
	return api.DeleteWorkflow204Response{}, nil
}

// toTemplate is t as the API shows it: its params beside a spec that
// leaves them out.
func toTemplate(t store.Template) api.WorkflowTemplate {
	out := api.WorkflowTemplate{Name: t.Name, Version: t.Version, Description: t.Description, CreatedAt: t.CreatedAt,
		Params: []api.Param{}}
	spec := t.Spec.Masked()
	_ = api.ConvertJSON(spec.Params, &out.Params) // the API type mirrors the domain's
	spec.Params = nil
	_ = api.ConvertJSON(spec, &out.Spec)
	return out
}

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
