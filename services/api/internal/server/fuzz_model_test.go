package server

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// fuzzOp is one operation of the spec with what a request to it carries.
type fuzzOp struct {
	id, method, path string
	params           []*openapi3.Parameter
	body             *openapi3.Schema // nil when the operation takes no body
	bodyRequired     bool
	methods          []string // every method the path declares
}

// fuzzOps walks the paths and operations the api serves (servedSpec), in a
// fixed order.
func fuzzOps(t *testing.T) []fuzzOp {
	spec, err := servedSpec()
	require.NoError(t, err)
	var ops []fuzzOp
	paths := spec.Paths.Map()
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		item := paths[path]
		declared := slices.Sorted(maps.Keys(item.Operations()))
		for _, method := range declared {
			op := item.Operations()[method]
			o := fuzzOp{id: op.OperationID, method: method, path: path, methods: declared}
			for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
				o.params = append(o.params, p.Value)
			}
			if rb := op.RequestBody; rb != nil {
				o.body = rb.Value.Content.Get("application/json").Schema.Value
				o.bodyRequired = rb.Value.Required
			}
			ops = append(ops, o)
		}
	}
	require.NotEmpty(t, ops)
	return ops
}

// fuzzWorld is what valid requests created, for later requests to name.
type fuzzWorld struct {
	mu       sync.Mutex
	runs     []domain.RunKey
	steps    map[domain.RunKey][]string
	workers  []string
	attempts []int64
	cursors  []string
	idemKeys []string
}

func newFuzzWorld() *fuzzWorld { return &fuzzWorld{steps: map[domain.RunKey][]string{}} }

func pick[T any](r *rand.Rand, xs []T) (T, bool) {
	var zero T
	if len(xs) == 0 {
		return zero, false
	}
	return xs[r.IntN(len(xs))], true
}

func (w *fuzzWorld) run(r *rand.Rand) (domain.RunKey, []string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k, ok := pick(r, w.runs)
	return k, w.steps[k], ok
}

func (w *fuzzWorld) worker(r *rand.Rand) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return pick(r, w.workers)
}

func (w *fuzzWorld) attempt(r *rand.Rand) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return pick(r, w.attempts)
}

func (w *fuzzWorld) heldAttempts(r *rand.Rand) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int64
	for range r.IntN(4) {
		if id, ok := pick(r, w.attempts); ok {
			out = append(out, id)
		}
	}
	return out
}

func (w *fuzzWorld) cursor(r *rand.Rand) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return pick(r, w.cursors)
}

func (w *fuzzWorld) idemKey(r *rand.Rand) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k, ok := pick(r, w.idemKeys); ok && r.IntN(2) == 0 {
		return k
	}
	k := fmt.Sprintf("key-%d", r.Uint32())
	w.idemKeys = append(w.idemKeys, k)
	return k
}

// learn records what a successful response created.
func (w *fuzzWorld) learn(op string, status int, body []byte) {
	if op != "CreateRun" && op != "RegisterWorker" && op != "ListRuns" {
		return
	}
	var out struct {
		Project, Domain, Name, ID string
		NextCursor                string `json:"next_cursor"`
		Spec                      struct{ Steps []struct{ Name string } }
	}
	if json.Unmarshal(body, &out) != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case op == "CreateRun" && status == http.StatusCreated:
		k := domain.RunKey{Project: out.Project, Domain: out.Domain, Run: out.Name}
		w.runs = append(w.runs, k)
		for _, s := range out.Spec.Steps {
			w.steps[k] = append(w.steps[k], s.Name)
		}
	case op == "RegisterWorker" && status == http.StatusCreated:
		w.workers = append(w.workers, out.ID)
	case op == "ListRuns" && status == http.StatusOK && out.NextCursor != "":
		w.cursors = append(w.cursors, out.NextCursor)
	}
}
