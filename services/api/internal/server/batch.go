package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/getkin/kin-openapi/openapi3"
)

// CreateRuns creates a batch of up to 1,000 runs (Hatchet's bulk trigger).
// Each item is checked alone, as CreateRun checks its body: one that fails
// answers at its index with CreateRun's problem (400 schema, 422 spec, 409
// name taken) and writes nothing. The others are created in one
// transaction (store.CreateRuns) and the scheduler is told of them all in
// one runs:start message. The answer is 200 with one result per item, in
// order; a database failure is a 500 and creates none.
func (h *Handlers) CreateRuns(ctx context.Context, req api.CreateRunsRequestObject) (api.CreateRunsResponseObject, error) {
	results := make([]api.RunBatchResult, len(req.Body.Runs))
	var valid []store.NewRun
	var at []int // valid[j] is item at[j]
	templates := map[api.WorkflowRef]store.Template{}
	limits := &rateLimitNames{}
	for i, raw := range req.Body.Runs {
		nr, p, err := h.batchItem(ctx, req.Project, req.Domain, raw, templates, limits)
		if err != nil {
			return nil, err
		}
		if p != nil {
			results[i].Error = p
			continue
		}
		valid, at = append(valid, nr), append(at, i)
	}
	if len(valid) == 0 {
		return api.CreateRuns200JSONResponse{Results: results}, nil
	}
	created, err := h.store.Runs().CreateRuns(ctx, valid)
	if err != nil {
		return nil, fmt.Errorf("create %d runs in %s/%s: %w", len(valid), req.Project, req.Domain, err)
	}
	var names []string
	for j, r := range created {
		res, err := h.batchResult(ctx, valid[j].Key, r)
		if err != nil {
			return nil, err
		}
		results[at[j]] = res
		if res.Run != nil {
			names = append(names, res.Run.Name)
		}
	}
	h.startRuns(ctx, req.Project, req.Domain, names)
	return api.CreateRuns200JSONResponse{Results: results}, nil
}

// batchItemSchema is the CreateRunsItem schema each item is checked against.
var batchItemSchema = sync.OnceValue(func() *openapi3.Schema {
	return openAPISpec().Components.Schemas["CreateRunsItem"].Value
})

// batchItem checks one item of a batch against the CreateRunsItem schema
// (a 400 problem naming each field, as CreateRun's body is checked), then
// as CreateRun checks its name, spec and params (a 422 problem), reading
// templates through the batch's cache. It returns the run to create, or
// the problem. Errors: reading a template.
func (h *Handlers) batchItem(ctx context.Context, project, dom string, raw map[string]any,
	templates map[api.WorkflowRef]store.Template, limits *rateLimitNames) (store.NewRun, *api.Problem, error) {
	if err := batchItemSchema().VisitJSON(raw, openapi3.MultiErrors()); err != nil {
		var fields []domain.FieldError
		collect(err, &fields)
		detail := "the run does not match the API"
		if len(fields) > 0 {
			detail = fields[0].Field + ": " + fields[0].Message
		}
		p := apiProblem(http.StatusBadRequest, problem.CodeInvalid, detail, fields...)
		return store.NewRun{}, &p, nil
	}
	var item api.CreateRunsItem
	if err := api.ConvertJSON(raw, &item); err != nil {
		p := apiProblem(http.StatusBadRequest, problem.CodeInvalid, "run: "+err.Error(),
			domain.FieldError{Field: "run", Message: err.Error()})
		return store.NewRun{}, &p, nil
	}
	nr, fieldErrs, err := h.newRun(ctx, project, dom, runRequest{Name: item.Name, Spec: item.Spec,
		Workflow: item.Workflow, Params: item.Params}, templates, limits)
	if err != nil {
		return store.NewRun{}, nil, err
	}
	if len(fieldErrs) > 0 {
		p := specProblem(fieldErrs)
		return store.NewRun{}, &p, nil
	}
	if item.IdempotencyKey != nil {
		nr.IdempotencyKey = *item.IdempotencyKey
	}
	return nr, nil, nil
}

// batchResult is the result of one item the store was given: its run (an
// earlier one, as it is now, when its idempotency key matched) or the
// problem of its error (409 for a name taken).
func (h *Handlers) batchResult(ctx context.Context, key domain.RunKey, r store.RunResult) (api.RunBatchResult, error) {
	if r.Err != nil {
		p, ok := problemFor(r.Err, subject{kind: "run", name: key.Run, in: key.Project + "/" + key.Domain})
		if !ok {
			return api.RunBatchResult{}, fmt.Errorf("create run %s: %w", key, r.Err)
		}
		return api.RunBatchResult{Error: &p}, nil
	}
	var outs map[string]map[string]string
	if !r.Created {
		var err error
		if outs, err = h.runOutputs(ctx, r.Detail); err != nil {
			return api.RunBatchResult{}, err
		}
	}
	run := toRun(r.Detail, outs)
	return api.RunBatchResult{Run: &run, Created: &r.Created}, nil
}

// startRuns asks the scheduler to start the named runs of project/domain,
// in one runs:start message (each earlier run too, as CreateRun does: a
// start that changes nothing is harmless).
func (h *Handlers) startRuns(ctx context.Context, project, dom string, names []string) {
	if len(names) == 0 {
		return
	}
	if err := h.queue.Enqueue(ctx, queue.NewRunsStartTask(project, dom, names)); err != nil {
		// The runs are recorded; the scheduler's resync starts them.
		h.log.Warn("enqueue runs start failed", "project", project, "domain", dom, "runs", len(names), "err", err)
	}
}
