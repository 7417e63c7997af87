package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/store"
)

// CreateRun validates the spec (inline, or a template's version with the
// given params), records the run and its root action, and asks the
// scheduler to start it. A run that can never run is refused with 422
// naming each offending field; nothing is written for it.
func (h *Handlers) CreateRun(ctx context.Context, req api.CreateRunRequestObject) (api.CreateRunResponseObject, error) {
	b := req.Body
	in := runRequest{Name: b.Name, Spec: b.Spec, Workflow: b.Workflow, Params: b.Params}
	limits := &rateLimitNames{}
	nr, fieldErrs, err := h.newRun(ctx, req.Project, req.Domain, in, nil, limits)
	if err != nil {
		return nil, err
	}
	if len(fieldErrs) > 0 {
		return asUnprocessable[api.CreateRun422ApplicationProblemPlusJSONResponse](specProblem(fieldErrs)), nil
	}
	key, name := nr.Key, nr.Key.Run
	if req.Params.IdempotencyKey != nil {
		nr.IdempotencyKey = *req.Params.IdempotencyKey
	}
	detail, created, err := h.store.Runs().CreateRun(ctx, nr)
	if errors.Is(err, store.ErrStaleTemplate) { // read it again, then decide again
		h.templates.forget(store.TemplateKey{Project: key.Project, Domain: key.Domain, Name: nr.Origin.WorkflowName},
			nr.Origin.WorkflowVersion)
		in.Name = &name
		idempotencyKey := nr.IdempotencyKey
		if nr, fieldErrs, err = h.newRun(ctx, req.Project, req.Domain, in, nil, limits); err != nil {
			return nil, err
		}
		if len(fieldErrs) > 0 {
			return asUnprocessable[api.CreateRun422ApplicationProblemPlusJSONResponse](specProblem(fieldErrs)), nil
		}
		nr.IdempotencyKey = idempotencyKey
		detail, created, err = h.store.Runs().CreateRun(ctx, nr)
	}
	taken := subject{kind: "run", name: name, in: req.Project + "/" + req.Domain}
	if p, ok := problemFor(err, taken); ok && p.Status == http.StatusConflict {
		return asConflict[api.CreateRun409ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("create run %s: %w", key, err)
	}
	key.Run = detail.Run.Name
	if err := h.starts.send(ctx, key); err != nil {
		// The run is recorded; the scheduler's resync starts it.
		h.log.Warn("enqueue run start failed", "run", key.String(), "err", err)
	}
	if !created { // the earlier run with this Idempotency-Key, as it is now
		outs, err := h.runOutputs(ctx, detail)
		if err != nil {
			return nil, err
		}
		return api.CreateRun200JSONResponse(toRun(detail, outs)), nil
	}
	return api.CreateRun201JSONResponse(toRun(detail, nil)), nil
}

// runRequest is what a create asks to run: an inline Spec or a Workflow
// template, exactly one, with Params.
type runRequest struct {
	Name     *string
	Spec     *api.WorkflowSpec
	Workflow *api.WorkflowRef
	Params   *api.ParamValues
}

// newRun validates a run to create in project/domain: its name (nil: a new
// one, newRunName), its spec (inline, or the template version it names,
// read through templates, a cache of one request's reads, nil for none) and
// its params, and its steps' rate limits and admission keys
// (stepAdmissionProblems, the project's rate limit names read through
// limits, once per request). The field errors name what CreateRun answers
// 422 for; nothing may be created with any. Errors: reading the template
// or the rate limit names.
func (h *Handlers) newRun(ctx context.Context, project, dom string, in runRequest,
	templates map[api.WorkflowRef]store.Template, limits *rateLimitNames) (store.NewRun, []domain.FieldError, error) {
	nr := store.NewRun{Key: domain.RunKey{Project: project, Domain: dom, Run: newRunName()}}
	var fieldErrs []domain.FieldError
	if in.Name != nil {
		nr.Key.Run = *in.Name
		if !domain.ValidName(*in.Name) {
			fieldErrs = append(fieldErrs, domain.FieldError{Field: "name",
				Message: "must be 1-63 characters of [a-z0-9-] starting and ending with a letter or digit"})
		}
	}
	switch {
	case (in.Spec == nil) == (in.Workflow == nil):
		return nr, append(fieldErrs, domain.FieldError{Field: "spec",
			Message: "give exactly one of spec (an inline workflow) and workflow (a template's name and version)"}), nil
	case in.Spec != nil:
		h.metrics.payloads.Observe(obs.KindSpec, specSize(*in.Spec))
		spec, errs := decodeSpec(*in.Spec)
		nr.Spec, fieldErrs = spec, append(fieldErrs, errs...)
	default:
		t, cached, errs, err := h.template(ctx, project, dom, *in.Workflow, templates)
		if err != nil {
			return nr, nil, err
		}
		fieldErrs = append(fieldErrs, errs...)
		nr.Spec = t.Spec
		nr.Origin = store.RunOrigin{WorkflowName: t.Name, WorkflowVersion: t.Version, Guard: cached,
			Latest: cached && in.Workflow.Version == nil}
	}
	if len(fieldErrs) > 0 {
		return nr, fieldErrs, nil
	}
	prefix := "spec"
	if in.Spec == nil {
		prefix = "workflow"
	}
	if errs, err := h.subWorkflowProblems(ctx, project, dom, nr.Spec, prefix, nr.Origin.WorkflowName); err != nil || len(errs) > 0 {
		return nr, errs, err
	}
	params, errs := domain.ResolveParams(nr.Spec.Params, deref(in.Params), "params")
	nr.Params = params
	if len(errs) > 0 {
		return nr, errs, nil
	}
	nr.Keys, errs = nr.Spec.AdmissionKeys(params, prefix)
	if len(errs) > 0 {
		return nr, errs, nil
	}
	errs, err := h.stepAdmissionProblems(ctx, project, nr.Spec, params, prefix, limits)
	return nr, errs, err
}

// template returns the template version ref names: from batch, a batch's
// reads, when it is not nil, else from the api's cache (cached true: a
// create of it must be guarded, store.RunOrigin.Guard), else read from the
// store. The field errors say it does not exist (or is deleted). Errors:
// the store's.
func (h *Handlers) template(ctx context.Context, project, dom string, ref api.WorkflowRef,
	batch map[api.WorkflowRef]store.Template) (t store.Template, cached bool, _ []domain.FieldError, _ error) {
	key, version := store.TemplateKey{Project: project, Domain: dom, Name: ref.Name}, deref(ref.Version)
	if t, ok := batch[ref]; ok {
		return t, false, nil, nil
	}
	if t, ok := h.templates.get(key, version); ok && batch == nil {
		return t, true, nil, nil
	}
	t, err := h.store.Templates().GetTemplate(ctx, key, version)
	if errors.Is(err, store.ErrNotFound) {
		what := "no workflow template named " + ref.Name
		if ref.Version != nil {
			what = fmt.Sprintf("workflow template %s has no version %d", ref.Name, *ref.Version)
		}
		return t, false, []domain.FieldError{{Field: "workflow", Message: what + " in " + project + "/" + dom}}, nil
	}
	if err != nil {
		return t, false, nil, fmt.Errorf("read workflow %s: %w", ref.Name, err)
	}
	h.templates.add(t, version)
	if batch != nil {
		batch[ref] = t
	}
	return t, false, nil, nil
}

// specProblem is the 422 invalid_spec problem naming fieldErrs (at least one).
func specProblem(fieldErrs []domain.FieldError) api.Problem {
	return apiProblem(http.StatusUnprocessableEntity, problem.CodeInvalidSpec,
		fieldErrs[0].Field+": "+fieldErrs[0].Message, fieldErrs...)
}

// decodeSpec converts the API spec to the domain's, normalizes and validates it.
func decodeSpec(in api.WorkflowSpec) (domain.WorkflowSpec, []domain.FieldError) {
	var spec domain.WorkflowSpec
	if err := api.ConvertJSON(in, &spec); err != nil {
		return spec, []domain.FieldError{{Field: "spec", Message: err.Error()}}
	}
	spec.Normalize()
	return spec, spec.Validate("spec")
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
	if req.Params.NameContains != nil {
		f.NameContains = *req.Params.NameContains
	}
	if req.Params.Cursor != nil {
		f.Cursor = *req.Params.Cursor
	}
	if req.Params.Limit != nil {
		f.Limit = *req.Params.Limit
	}
	runs, next, err := h.store.Runs().ListRuns(ctx, f)
	if p, ok := problemFor(err, subject{}); ok && p.Status == http.StatusBadRequest {
		return asBadRequest[api.ListRuns400ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("list runs of %s/%s: %w", req.Project, req.Domain, err)
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
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}
	d, err := h.store.Runs().GetRun(ctx, key)
	if p, ok := problemFor(err, subject{kind: "run", name: req.Run}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.GetRun404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", key, err)
	}
	outs, err := h.runOutputs(ctx, d)
	if err != nil {
		return nil, err
	}
	if d.Run.PendingReason, err = h.livePendingReason(ctx, d.Run); err != nil {
		return nil, fmt.Errorf("read the place in line of run %s: %w", key, err)
	}
	return api.GetRun200JSONResponse(withChildren(toRun(d, outs), d.Children)), nil
}

// GetAction returns one action with the page of its tasks (and their
// attempt history) that the cursor and limit ask for.
func (h *Handlers) GetAction(ctx context.Context, req api.GetActionRequestObject) (api.GetActionResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}.Action(req.Action)
	page := store.TaskPage{Cursor: deref(req.Params.Cursor), Limit: deref(req.Params.Limit)}
	d, err := h.store.Actions().GetActionPage(ctx, key, page)
	p, ok := problemFor(err, subject{kind: "action", name: key.String()})
	switch {
	case ok && p.Status == http.StatusNotFound:
		return asNotFound[api.GetAction404ApplicationProblemPlusJSONResponse](p), nil
	case ok && p.Status == http.StatusBadRequest:
		return asBadRequest[api.GetAction400ApplicationProblemPlusJSONResponse](p), nil
	case err != nil:
		return nil, fmt.Errorf("read action %s: %w", key, err)
	}
	outs, err := h.actionOutputs(ctx, key, d)
	if err != nil {
		return nil, err
	}
	return api.GetAction200JSONResponse(withOutputs(toAction(d), outs)), nil
}
