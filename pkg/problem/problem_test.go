package problem_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/stretchr/testify/require"
)

// The "errors" member keeps its wire names now that its element is the
// domain's FieldError.
func TestNewMarshalsFieldErrors(t *testing.T) {
	t.Parallel()
	p := problem.New(http.StatusUnprocessableEntity, problem.CodeInvalidSpec, "spec.steps: is required",
		domain.FieldError{Field: "spec.steps", Message: "is required"})
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"/problems/invalid_spec","title":"Unprocessable Entity","status":422,
		"detail":"spec.steps: is required","code":"invalid_spec",
		"errors":[{"field":"spec.steps","message":"is required"}]}`, string(raw))
}
