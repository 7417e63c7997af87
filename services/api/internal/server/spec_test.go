package server

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// TestServedSpecIsBothAPIs: the spec the validator routes by holds every
// operation of the public API and of the worker API, each with its own
// role and security; the public API holds no worker-role operation.
func TestServedSpecIsBothAPIs(t *testing.T) {
	t.Parallel()
	served, err := servedSpec()
	require.NoError(t, err)
	require.NoError(t, served.Validate(context.Background()))
	public, err := api.GetSpec()
	require.NoError(t, err)
	worker, err := workerapi.GetSpec()
	require.NoError(t, err)

	count := 0
	for path, item := range public.Paths.Map() {
		for method, op := range item.Operations() {
			count++
			require.NotEqual(t, RoleWorker, op.Extensions["x-capstan-role"], "%s %s is a worker route in capstan.yaml", method, path)
			got := served.Paths.Value(path).GetOperation(method)
			require.NotNil(t, got, "%s %s", method, path)
			require.Equal(t, op.OperationID, got.OperationID)
		}
	}
	for path, item := range worker.Paths.Map() {
		for method, op := range item.Operations() {
			count++
			require.Equal(t, RoleWorker, op.Extensions["x-capstan-role"], "%s %s", method, path)
			got := served.Paths.Value(path).GetOperation(method)
			require.NotNil(t, got, "%s %s", method, path)
			require.Equal(t, op.OperationID, got.OperationID)
			require.NotNil(t, got.Security, "%s %s keeps the worker API's security", method, path)
			require.Equal(t, worker.Security, *got.Security)
		}
	}
	n := 0
	for _, item := range served.Paths.Map() {
		n += len(item.Operations())
	}
	require.Equal(t, count, n, "the served spec has only the two APIs' operations")
}

// TestMergeSpecsRefusesClashes: an operation or an operationId both specs
// declare is an error, not one silently hiding the other.
func TestMergeSpecsRefusesClashes(t *testing.T) {
	t.Parallel()
	spec := func(path, method, id string) *openapi3.T {
		op := openapi3.NewOperation()
		op.OperationID = id
		op.Responses = openapi3.NewResponses()
		paths := openapi3.NewPaths()
		item := &openapi3.PathItem{}
		item.SetOperation(method, op)
		paths.Set(path, item)
		return &openapi3.T{OpenAPI: "3.0.3", Paths: paths, Components: &openapi3.Components{}}
	}
	_, err := mergeSpecs(spec("/v1/x", "GET", "A"), spec("/v1/x", "GET", "B"))
	require.ErrorContains(t, err, "GET /v1/x is in both specs")
	_, err = mergeSpecs(spec("/v1/x", "GET", "A"), spec("/v1/y", "GET", "A"))
	require.ErrorContains(t, err, "operationId A is in both specs")
	merged, err := mergeSpecs(spec("/v1/x", "GET", "A"), spec("/v1/x", "POST", "B"))
	require.NoError(t, err)
	require.Equal(t, "B", merged.Paths.Value("/v1/x").Post.OperationID)
}
