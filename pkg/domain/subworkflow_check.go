package domain

import (
	"fmt"
	"slices"
	"strings"
)

// TemplateSpecs are workflow templates' specs by the reference that names
// them (a version, or Version 0 for the latest), as loaded for a check.
type TemplateSpecs map[WorkflowRef]WorkflowSpec

// WorkflowRefs lists the templates the spec's workflow steps name, once
// each, in step order.
func (w WorkflowSpec) WorkflowRefs() []WorkflowRef {
	var refs []WorkflowRef
	for _, s := range w.Steps {
		if s.Kind == KindWorkflow && s.Workflow != nil && !slices.Contains(refs, *s.Workflow) {
			refs = append(refs, *s.Workflow)
		}
	}
	return refs
}

// CheckSubWorkflows checks the workflow steps of a valid spec, run at
// depth (0: a run created through the API), against the templates they
// run (known: every template reachable from spec, as far as they exist):
// each names a template that exists, gives it params it declares (and its
// required ones, literals of their types) and declares only outputs the
// template does; no template runs itself through its children (a cycle, by
// name, self being the template spec is a version of, "" for an inline
// spec), and no chain of children nests deeper than MaxDepth. Fields are
// named under prefix ("spec.steps[0].workflow.name").
func CheckSubWorkflows(spec WorkflowSpec, prefix string, known TemplateSpecs, self string, depth int) []FieldError {
	var errs []FieldError
	w := graphWalk{known: known, heights: map[WorkflowRef]int{}, problems: map[WorkflowRef]string{}}
	if self != "" {
		w.path = []string{self}
	}
	for i, s := range spec.Steps {
		if s.Kind != KindWorkflow || s.Workflow == nil {
			continue
		}
		at := fmt.Sprintf("%s.steps[%d]", prefix, i)
		child, ok := known[*s.Workflow]
		if !ok {
			errs = append(errs, FieldError{at + ".workflow.name", "no workflow template " + s.Workflow.Describe()})
			continue
		}
		for _, e := range append(s.checkChildParams(child.Params, s.ItemParam()), s.checkChildOutputs(s.Workflow.Name, child)...) {
			errs = append(errs, FieldError{at + e.Field, e.Message})
		}
		h, problem := w.height(*s.Workflow)
		switch {
		case problem != "":
			errs = append(errs, FieldError{at + ".workflow.name", problem})
		case depth+h > MaxDepth:
			errs = append(errs, FieldError{at + ".workflow", fmt.Sprintf(
				"template %s nests child runs %d deep below this run (at depth %d); at most %d", s.Workflow.Name, h, depth, MaxDepth)})
		}
	}
	return errs
}

// Describe names a reference for a message: "named x", or "x version 3".
func (r WorkflowRef) Describe() string {
	if r.Version > 0 {
		return fmt.Sprintf("%s version %d", r.Name, r.Version)
	}
	return "named " + r.Name
}

// graphWalk walks the template graph depth first, memoizing each
// template's height (the longest chain of runs it starts, itself counted)
// or the problem under it.
type graphWalk struct {
	known    TemplateSpecs
	heights  map[WorkflowRef]int
	problems map[WorkflowRef]string
	path     []string // template names from the root, for cycles
}

// height returns ref's height, or the problem found under it: a cycle, a
// missing template, a chain longer than MaxDepth.
func (w *graphWalk) height(ref WorkflowRef) (int, string) {
	if i := slices.Index(w.path, ref.Name); i >= 0 {
		return 0, "template cycle: " + strings.Join(append(slices.Clone(w.path[i:]), ref.Name), " -> ")
	}
	if h, ok := w.heights[ref]; ok {
		return h, ""
	}
	if p, ok := w.problems[ref]; ok {
		return 0, p
	}
	spec, ok := w.known[ref]
	if !ok {
		return 0, "no workflow template " + ref.Describe()
	}
	w.path = append(w.path, ref.Name)
	defer func() { w.path = w.path[:len(w.path)-1] }()
	h := 1
	for _, child := range spec.WorkflowRefs() {
		ch, problem := w.height(child)
		if problem != "" {
			if !strings.HasPrefix(problem, "template cycle") {
				problem = "template " + ref.Name + ": " + problem
			}
			w.problems[ref] = problem
			return 0, problem
		}
		if h = max(h, ch+1); h > MaxDepth+1 {
			break // deep enough to refuse: the rest need not be walked
		}
	}
	w.heights[ref] = h
	return h, ""
}
