package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// Outputs and inputs (KubeVela's): an executor reports a SUCCEEDED task's
// output values, GetAttempt hands a consumer its inputs resolved from the
// producers' outputs, and a run's SUCCEEDED actions show theirs. Every read
// goes through store.StepOutputs, once per request.

// checkOutputs returns what is wrong with a report's outputs, each naming
// its field: a name that is not an environment-variable name, a value over
// domain.MaxOutputValueBytes or holding NUL, values together over
// domain.MaxTaskOutputBytes. The executor fails an attempt past these bounds
// before it reports, so only a foreign or broken client meets them.
func checkOutputs(outs *map[string]string) []domain.FieldError {
	if outs == nil {
		return nil
	}
	var errs []domain.FieldError
	total := 0
	for _, name := range slices.Sorted(maps.Keys(*outs)) {
		v, field := (*outs)[name], "outputs."+name
		total += len(v)
		switch {
		case !domain.ValidOutputName(name):
			errs = append(errs, domain.FieldError{Field: field, Message: "is not an environment-variable name"})
		case len(v) > domain.MaxOutputValueBytes:
			errs = append(errs, domain.FieldError{Field: field,
				Message: fmt.Sprintf("is %d bytes; at most %d (1 MiB)", len(v), domain.MaxOutputValueBytes)})
		case strings.ContainsRune(v, 0):
			errs = append(errs, domain.FieldError{Field: field, Message: "must not contain the NUL character (U+0000)"})
		}
	}
	if total > domain.MaxTaskOutputBytes {
		errs = append(errs, domain.FieldError{Field: "outputs",
			Message: fmt.Sprintf("values total %d bytes; at most %d (1 MiB)", total, domain.MaxTaskOutputBytes)})
	}
	return errs
}

// hasOutputs reports whether an action is a SUCCEEDED step that declares
// outputs: only such a step has any to show.
func hasOutputs(a store.Action) bool {
	return a.Phase == string(domain.PhaseSucceeded) && len(a.Spec.Outputs) > 0
}

// runOutputs returns the outputs of a run's steps, read in one statement,
// or nil without a read when no action has any (hasOutputs).
func (h *Handlers) runOutputs(ctx context.Context, d store.RunDetail) (map[string]map[string]string, error) {
	if !slices.ContainsFunc(d.Actions, func(a store.ActionDetail) bool { return hasOutputs(a.Action) }) {
		return nil, nil
	}
	key := domain.RunKey{Project: d.Run.Project, Domain: d.Run.Domain, Run: d.Run.Name}
	outs, err := h.store.Actions().StepOutputs(ctx, key, nil)
	if err != nil {
		return nil, fmt.Errorf("read outputs of run %s: %w", key, err)
	}
	return outs, nil
}

// actionOutputs returns one action's outputs, or nil without a read when it
// has none (hasOutputs).
func (h *Handlers) actionOutputs(ctx context.Context, key domain.ActionKey, d store.ActionDetail) (map[string]string, error) {
	if !hasOutputs(d.Action) {
		return nil, nil
	}
	outs, err := h.store.Actions().StepOutputs(ctx, key.RunKey, []string{key.Action})
	if err != nil {
		return nil, fmt.Errorf("read outputs of action %s: %w", key, err)
	}
	return outs[key.Action], nil
}

// withOutputs sets a's outputs; it leaves them absent when there are none.
func withOutputs(a api.Action, outs map[string]string) api.Action {
	if len(outs) > 0 {
		a.Outputs = &outs
	}
	return a
}

// resolveInputs returns each input's value, NAME → the producing step's
// output, read in one statement; nil when there are no inputs. A value the
// producer does not have (it declares no such output, or did not succeed,
// as before a step with `if: always`) is "".
func (h *Handlers) resolveInputs(ctx context.Context, key domain.RunKey, inputs []domain.Input) (map[string]string, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	var producers []string
	for _, in := range inputs {
		if step, _ := in.Producer(); !slices.Contains(producers, step) {
			producers = append(producers, step)
		}
	}
	outs, err := h.store.Actions().StepOutputs(ctx, key, producers)
	if err != nil {
		return nil, err
	}
	values := make(map[string]string, len(inputs))
	for _, in := range inputs {
		step, output := in.Producer()
		values[in.As] = outs[step][output]
	}
	return values, nil
}
