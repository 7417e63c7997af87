package server

import (
	"context"
	"fmt"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// subWorkflowProblems checks the workflow steps of spec (valid, run at
// depth 0, of template self or "" for an inline spec) against the
// templates of project/dom they reach (domain.CheckSubWorkflows): unknown
// templates, params and outputs that do not fit, template cycles, nesting
// deeper than domain.MaxDepth. The templates are read level by level, one
// statement a level (store.TemplateVersions); a spec without workflow
// steps reads none. Field errors are named under prefix. Errors: the
// store's.
func (h *Handlers) subWorkflowProblems(ctx context.Context, project, dom string, spec domain.WorkflowSpec, prefix,
	self string) ([]domain.FieldError, error) {
	refs := spec.WorkflowRefs()
	if len(refs) == 0 {
		return nil, nil
	}
	known := domain.TemplateSpecs{}
	asked := map[domain.WorkflowRef]bool{}
	for level := 0; len(refs) > 0 && level <= domain.MaxDepth+1; level++ {
		var ask []store.TemplateRef
		for _, r := range refs {
			if !asked[r] {
				asked[r] = true
				ask = append(ask, store.TemplateRef{TemplateKey: store.TemplateKey{Project: project, Domain: dom, Name: r.Name},
					Version: r.Version})
			}
		}
		got, err := h.store.Templates().TemplateVersions(ctx, ask)
		if err != nil {
			return nil, fmt.Errorf("read %d workflow templates: %w", len(ask), err)
		}
		refs = nil
		for ref, t := range got {
			known[domain.WorkflowRef{Name: ref.Name, Version: ref.Version}] = t.Spec
			refs = append(refs, t.Spec.WorkflowRefs()...)
		}
	}
	return domain.CheckSubWorkflows(spec, prefix, known, self, 0), nil
}

// withChildren is run with its child runs, the children of its workflow
// steps.
func withChildren(run api.Run, kids []store.RunChild) api.Run {
	if len(kids) == 0 {
		return run
	}
	out := make([]api.ChildRunRef, len(kids))
	for i, k := range kids {
		out[i] = api.ChildRunRef{Name: k.Name, Action: k.Action, Index: k.Index, Generation: k.Generation, Try: k.Try,
			Phase: api.Phase(k.Phase)}
	}
	run.Children = &out
	return run
}
