package server

import (
	gojson "github.com/goccy/go-json"

	"github.com/capstan-run/capstan/pkg/api"
)

// outputsSize is the size in bytes of a task's reported outputs: the sum
// of their names and values.
func outputsSize(outputs map[string]string) int {
	n := 0
	for k, v := range outputs {
		n += len(k) + len(v)
	}
	return n
}

// specSize is the size in bytes of a workflow spec as JSON (0 when it does
// not encode, which a decoded request body always does).
func specSize(spec api.WorkflowSpec) int {
	b, err := gojson.Marshal(spec)
	if err != nil {
		return 0
	}
	return len(b)
}
