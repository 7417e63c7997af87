package server

import (
	"fmt"
	"maps"
	"slices"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/getkin/kin-openapi/openapi3"
)

// servedSpec is every operation the api serves, as one description: the
// public API (openapi/capstan.yaml, pkg/api) with the worker API
// (openapi/worker.yaml, pkg/workerapi) merged in by mergeSpecs, so that the
// validator routes, authorizes and validates every request against one
// router. Errors: an embedded spec that does not load, or two that clash.
func servedSpec() (*openapi3.T, error) {
	public, err := api.GetSpec()
	if err != nil {
		return nil, fmt.Errorf("public API: %w", err)
	}
	worker, err := workerapi.GetSpec()
	if err != nil {
		return nil, fmt.Errorf("worker API: %w", err)
	}
	return mergeSpecs(public, worker)
}

// mergeSpecs adds extra's operations to base's paths (a path both declare
// gets the operations of both) and returns base. Each operation of extra
// keeps the security it had there: extra's global requirements become its
// own, and extra's security schemes join base's. Errors: an operation (a
// path and method) or an operationId both declare, or a security scheme of
// the same name that differs in more than its description.
func mergeSpecs(base, extra *openapi3.T) (*openapi3.T, error) {
	ids := map[string]bool{}
	for _, item := range base.Paths.Map() {
		for _, op := range item.Operations() {
			ids[op.OperationID] = true
		}
	}
	if base.Components == nil {
		base.Components = &openapi3.Components{}
	}
	if base.Components.SecuritySchemes == nil {
		base.Components.SecuritySchemes = openapi3.SecuritySchemes{}
	}
	for name, ref := range extra.Components.SecuritySchemes {
		have, ok := base.Components.SecuritySchemes[name]
		if !ok {
			base.Components.SecuritySchemes[name] = ref
			continue
		}
		a, b := *have.Value, *ref.Value
		a.Description, b.Description = "", ""
		if a.Type != b.Type || a.Scheme != b.Scheme || a.BearerFormat != b.BearerFormat || a.In != b.In || a.Name != b.Name {
			return nil, fmt.Errorf("security scheme %s differs between the specs", name)
		}
	}
	paths := extra.Paths.Map()
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		item := paths[path]
		into := base.Paths.Value(path)
		var params openapi3.Parameters // item's, for each operation: base's item has its own
		if into == nil {
			into = &openapi3.PathItem{Extensions: item.Extensions, Summary: item.Summary,
				Description: item.Description, Parameters: item.Parameters}
			base.Paths.Set(path, into)
		} else {
			params = item.Parameters
		}
		for method, op := range item.Operations() {
			if into.GetOperation(method) != nil {
				return nil, fmt.Errorf("%s %s is in both specs", method, path)
			}
			if ids[op.OperationID] {
				return nil, fmt.Errorf("operationId %s is in both specs", op.OperationID)
			}
			ids[op.OperationID] = true
			if op.Security == nil {
				security := slices.Clone(extra.Security)
				op.Security = &security
			}
			if len(params) > 0 {
				op.Parameters = append(slices.Clone(params), op.Parameters...)
			}
			into.SetOperation(method, op)
		}
	}
	return base, nil
}
