package domain

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// TriggerEvent is what a trigger's CEL reads as `event`: event.key (the
// event's key, e.g. "order.created"), event.id and event.payload, a JSON
// value as encoding/json decodes it into an any (objects map[string]any,
// arrays []any, numbers float64; a Go integer type is read as a CEL int).
// A json.Number is read as a string.
type TriggerEvent struct {
	Key     string
	ID      string
	Payload any
}

// TriggerRule is a trigger's compiled filter and param mappings (Hatchet's
// event triggers with CEL filters): an event of the trigger's key starts a
// run when the filter holds, with the params the mappings compute. Build it
// with CompileTrigger; it is safe for concurrent use.
type TriggerRule struct {
	filter cel.Program // nil: every event matches
	params []triggerParam
}

// triggerParam is one param mapping: the run's param name, from prog.
type triggerParam struct {
	name string
	prog cel.Program
}

// triggerExpr is a compiled trigger expression and its output type.
type triggerExpr struct {
	prog cel.Program
	out  *cel.Type
}

// eventFields are the keys of `event`.
var eventFields = []string{"key", "id", "payload"}

// triggerEnv declares `event`; numbers compare across int and double, so
// event.payload.amount > 100 holds for a decoded JSON 150.
var triggerEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true))
})

// CompileTrigger compiles a trigger's filter ("" = every event of the
// trigger's key) and params (run param name → CEL expression over event,
// of any type). Errors, sorted by field (without a prefix, `filter`,
// `params`…): `<prefix>.filter` when the filter
// is longer than MaxTriggerExprBytes, does not compile, reads a field event
// does not have, or is not a boolean (nor dyn); `<prefix>.params` when there
// are more than MaxParams; `<prefix>.params.<name>` when the name is not a
// valid param name or the expression fails as a filter can (but of any
// type). On error the rule is nil. Whether the params are the ones the
// workflow declares is ResolveParams' to say.
func CompileTrigger(filter string, params map[string]string, prefix string) (*TriggerRule, []FieldError) {
	var errs []FieldError
	add := func(field, format string, a ...any) {
		if prefix == "" {
			field = field[1:]
		}
		errs = append(errs, FieldError{Field: prefix + field, Message: fmt.Sprintf(format, a...)})
	}
	r := &TriggerRule{}
	if filter != "" {
		x, err := compileTriggerExpr(filter)
		switch {
		case err != nil:
			add(".filter", "%s", err)
		case !x.out.IsExactType(cel.BoolType) && !x.out.IsExactType(cel.DynType):
			add(".filter", "must be a boolean expression, is %s", x.out)
		default:
			r.filter = x.prog
		}
	}
	if len(params) > MaxParams {
		add(".params", "has %d params; at most %d", len(params), MaxParams)
		return nil, errs
	}
	for _, name := range slices.Sorted(maps.Keys(params)) {
		if msg := paramNameProblem(name); msg != "" {
			add(".params."+name, "%s", msg)
			continue
		}
		x, err := compileTriggerExpr(params[name])
		if err != nil {
			add(".params."+name, "%s", err)
			continue
		}
		r.params = append(r.params, triggerParam{name: name, prog: x.prog})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// compileTriggerExpr compiles one trigger expression, from the cache when
// it holds it. Errors: compileExpr's, or it reads an unknown field of
// event.
func compileTriggerExpr(expr string) (*triggerExpr, error) {
	if x, ok := exprs.get("trigger:" + expr); ok {
		return x.(*triggerExpr), nil
	}
	env, err := triggerEnv()
	if err != nil {
		return nil, err
	}
	checked, prog, err := compileExpr(env, expr)
	if err != nil {
		return nil, err
	}
	for _, f := range referencedKeys(checked.NativeRep().Expr(), "event") {
		if !slices.Contains(eventFields, f) {
			return nil, fmt.Errorf("reads event.%s; an event has key, id and payload", clipText(f))
		}
	}
	x := &triggerExpr{prog: prog, out: checked.OutputType()}
	exprs.put("trigger:"+expr, x)
	return x, nil
}

// Apply evaluates the rule on ev: whether the filter holds, and when it
// does, the run's params, name → the expression's value as JSON-able Go
// (int, uint and double → float64, string, bool, list → []any, map with
// string keys → map[string]any, null → nil). Errors, a FieldError naming
// "filter" or "params.<name>": the expression failed at run time (e.g. it
// read a key the payload does not have, or exceeded its limits:
// ErrExprLimit; the filter and the params are one decision, exprBudget),
// the filter is not a boolean, or a param's value has no JSON form (bytes,
// a timestamp, a map with a non-string key, a non-finite number). On error
// match is false and params nil: the caller records the error as the
// delivery's failure and starts nothing.
func (r *TriggerRule) Apply(ev TriggerEvent) (match bool, params map[string]any, err error) {
	vars := map[string]any{"event": map[string]any{"key": ev.Key, "id": ev.ID, "payload": ev.Payload}}
	var b exprBudget
	defer b.done()
	if r.filter != nil {
		out, evalErr := b.eval(r.filter, vars)
		if evalErr != nil {
			return false, nil, FieldError{"filter", oneLine(evalErr.Error())}
		}
		b, ok := out.(types.Bool)
		if !ok {
			return false, nil, FieldError{"filter", fmt.Sprintf("is a %s, not a boolean", out.Type().TypeName())}
		}
		if !b {
			return false, nil, nil
		}
	}
	params = make(map[string]any, len(r.params))
	for _, p := range r.params {
		out, evalErr := b.eval(p.prog, vars)
		if evalErr != nil {
			return false, nil, FieldError{"params." + p.name, oneLine(evalErr.Error())}
		}
		v, convErr := jsonValue(out)
		if convErr != nil {
			return false, nil, FieldError{"params." + p.name, convErr.Error()}
		}
		params[p.name] = v
	}
	return true, params, nil
}

// jsonValue converts a CEL value to the Go value encoding/json decodes its
// JSON into. Errors: the value has no JSON form.
func jsonValue(v ref.Val) (any, error) {
	switch x := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(x), nil
	case types.String:
		return string(x), nil
	case types.Int:
		return float64(x), nil
	case types.Uint:
		return float64(x), nil
	case types.Double:
		if f := float64(x); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, nil
		}
		return nil, fmt.Errorf("%v is not a finite number", x)
	case traits.Lister:
		return jsonList(x)
	case traits.Mapper:
		return jsonMap(x)
	}
	return nil, fmt.Errorf("a %s has no JSON form", v.Type().TypeName())
}

// jsonList converts a CEL list with jsonValue.
func jsonList(l traits.Lister) (any, error) {
	n, ok := l.Size().(types.Int)
	if !ok {
		return nil, fmt.Errorf("a list of unknown size has no JSON form")
	}
	out := make([]any, 0, n)
	for i := range n {
		v, err := jsonValue(l.Get(i))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// jsonMap converts a CEL map with string keys with jsonValue.
func jsonMap(m traits.Mapper) (any, error) {
	out := map[string]any{}
	for it := m.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		key, ok := k.(types.String)
		if !ok {
			return nil, fmt.Errorf("a map with a %s key has no JSON form", k.Type().TypeName())
		}
		v, err := jsonValue(m.Get(k))
		if err != nil {
			return nil, err
		}
		out[string(key)] = v
	}
	return out, nil
}
