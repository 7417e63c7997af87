package server

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// specRouter finds the operation a request calls among those the api serves
// (servedSpec: capstan.yaml and worker.yaml). It holds one kin-openapi
// router per HTTP method, each over that method's operations alone: a single
// router answers "method not allowed" at the first path that matches, static
// before templated, so the batch create (POST .../runs/batch) would hide
// GET .../runs/{run} for a run named "batch".
type specRouter struct {
	byMethod map[string]routers.Router
	methods  []string // byMethod's keys, sorted
}

// newSpecRouter builds the routers of spec's methods. Errors: a path the
// router cannot compile.
func newSpecRouter(spec *openapi3.T) (*specRouter, error) {
	paths := map[string]*openapi3.Paths{}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			if paths[method] == nil {
				paths[method] = openapi3.NewPaths()
			}
			one := &openapi3.PathItem{Extensions: item.Extensions, Summary: item.Summary,
				Description: item.Description, Servers: item.Servers, Parameters: item.Parameters}
			one.SetOperation(method, op)
			paths[method].Set(path, one)
		}
	}
	r := &specRouter{byMethod: map[string]routers.Router{}}
	for method, p := range paths {
		only := *spec
		only.Paths = p
		router, err := gorillamux.NewRouter(&only)
		if err != nil {
			return nil, fmt.Errorf("%s routes: %w", method, err)
		}
		r.byMethod[method] = router
		r.methods = append(r.methods, method)
	}
	slices.Sort(r.methods)
	return r, nil
}

// FindRoute returns req's operation and path parameters. Errors:
// routers.ErrMethodNotAllowed when only other methods serve the path,
// routers.ErrPathNotFound when none does.
func (r *specRouter) FindRoute(req *http.Request) (*routers.Route, map[string]string, error) {
	if router, ok := r.byMethod[req.Method]; ok {
		if route, params, err := router.FindRoute(req); err == nil {
			return route, params, nil
		}
	}
	for _, method := range r.methods {
		if method == req.Method {
			continue
		}
		if _, _, err := r.byMethod[method].FindRoute(req); err == nil {
			return nil, nil, routers.ErrMethodNotAllowed
		}
	}
	return nil, nil, routers.ErrPathNotFound
}
