package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Param types: the JSON a run's value of a param must be.
const (
	// ParamString takes a JSON string (the default type).
	ParamString = "string"
	// ParamNumber takes a JSON number, held as a float64.
	ParamNumber = "number"
	// ParamBoolean takes true or false.
	ParamBoolean = "boolean"
	// ParamJSON takes any JSON value, null included.
	ParamJSON = "json"
)

// KnownParamTypes lists the types a param may declare.
var KnownParamTypes = []string{ParamString, ParamNumber, ParamBoolean, ParamJSON}

// Limits on a workflow's params.
const (
	// MaxParams is how many params a workflow may declare.
	MaxParams = 100
	// MaxParamDescription bounds a param's description, in characters.
	MaxParamDescription = 1000
)

// paramName is the form of a param's name: an environment variable a task
// step gets and a key a condition reads as params.<name>.
var paramName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Param declares one parameter of a workflow (Argo's workflow parameters,
// Hatchet's workflow input): a typed value each run takes, which every task
// step gets as the environment variable Name (ParamEnv) and conditions read
// as params.<Name>. The JSON names are fixed for clients.
type Param struct {
	// Name is 1-64 characters of [A-Za-z0-9_], not starting with a digit
	// nor with ReservedEnvPrefix.
	Name string `json:"name"`
	// Type is one of KnownParamTypes; Normalize turns "" into ParamString.
	Type string `json:"type"`
	// Default is the value of a run that gives none, a JSON value of Type;
	// nil = none. A required param has none.
	Default any `json:"default,omitempty"`
	// Required makes a run that gives no value an error.
	Required bool `json:"required,omitempty"`
	// Description says what the param is for, at most MaxParamDescription
	// characters.
	Description string `json:"description,omitempty"`
}

// validateParams checks a spec's param declarations; each problem names its
// field relative to the spec (".params[1].type").
func validateParams(decls []Param) []FieldError {
	if len(decls) > MaxParams {
		return []FieldError{{".params", fmt.Sprintf("has %d params; at most %d", len(decls), MaxParams)}}
	}
	if len(decls) == 0 {
		return nil
	}
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	seen := make(map[string]int, len(decls))
	for i, p := range decls {
		at := fmt.Sprintf(".params[%d]", i)
		if msg := paramNameProblem(p.Name); msg != "" {
			add(at+".name", "%s", msg)
		} else if j, dup := seen[p.Name]; dup {
			add(at+".name", "duplicate param %q (also params[%d])", p.Name, j)
		} else {
			seen[p.Name] = i
		}
		switch {
		case !slices.Contains(KnownParamTypes, p.Type):
			add(at+".type", "must be one of %s; got %q", strings.Join(KnownParamTypes, ", "), clipText(p.Type))
		case p.Default != nil && p.Required:
			add(at+".default", "a required param takes no default; drop one of them")
		case p.Default != nil:
			if _, msg := p.value(p.Default); msg != "" {
				add(at+".default", "%s", msg)
			}
		}
		if n := utf8.RuneCountInString(p.Description); n > MaxParamDescription {
			add(at+".description", "is %d characters; at most %d", n, MaxParamDescription)
		}
	}
	return errs
}

// paramNameProblem says what is wrong with a param's name, or "".
func paramNameProblem(name string) string {
	switch {
	case !paramName.MatchString(name):
		return fmt.Sprintf("must be 1-64 characters of [A-Za-z0-9_], not starting with a digit; got %q", clipText(name))
	case strings.HasPrefix(name, ReservedEnvPrefix):
		return "names starting with " + ReservedEnvPrefix + " are reserved"
	}
	return ""
}

// paramClashes names the environment variables of s that a declared param
// would set too: its env, secret_env and inputs' names (fields relative to
// the step).
func (s Step) paramClashes(decls []Param) []FieldError {
	if !s.RunsProcess() {
		return nil // no environment: a workflow step's inputs are its child's params
	}
	var errs []FieldError
	const msg = "is a param of the workflow; set it through params"
	for _, p := range decls {
		if hasKey(s.Env, p.Name) {
			errs = append(errs, FieldError{".env." + p.Name, msg})
		}
		if hasKey(s.SecretEnv, p.Name) {
			errs = append(errs, FieldError{".secret_env." + p.Name, msg})
		}
		for k, in := range s.Inputs {
			if in.As == p.Name {
				errs = append(errs, FieldError{fmt.Sprintf(".inputs[%d].as", k), fmt.Sprintf("%q is a param of the workflow", p.Name)})
			}
		}
	}
	return errs
}

// value returns v as a value of p's type, in the form a run holds it
// (string, float64, bool, or for ParamJSON the value as encoding/json
// decodes it into an any), or says why it is not one.
func (p Param) value(v any) (any, string) {
	var out any
	ok := true
	switch p.Type {
	case ParamString:
		out, ok = v.(string)
	case ParamBoolean:
		out, ok = v.(bool)
	case ParamNumber:
		f, num := toFloat(v)
		if num && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return nil, "must be a finite number"
		}
		out, ok = f, num
	case ParamJSON:
		c, err := decodedJSON(v)
		if err != nil {
			return nil, "must be a JSON value: " + err.Error()
		}
		out = c
	default:
		return nil, fmt.Sprintf("has unknown type %q", clipText(p.Type))
	}
	if !ok {
		return nil, fmt.Sprintf("must be a %s, got %s", p.Type, jsonKind(v))
	}
	if n := len(paramText(p.Type, out)); n > MaxEnvValueBytes {
		return nil, fmt.Sprintf("is %d bytes as text; at most %d", n, MaxEnvValueBytes)
	}
	return out, ""
}

// toFloat returns a number given as a float64, json.Number or any Go
// integer type as a float64 (-0 as 0), and whether v is one.
func toFloat(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	case json.Number:
		var err error
		if f, err = x.Float64(); err != nil {
			return 0, false
		}
	case int, int8, int16, int32, int64:
		f = float64(reflect.ValueOf(x).Int())
	case uint, uint8, uint16, uint32, uint64:
		f = float64(reflect.ValueOf(x).Uint())
	default:
		return 0, false
	}
	if f == 0 {
		f = 0
	}
	return f, true
}

// decodedJSON returns v as encoding/json decodes its encoding into an any:
// nil, bool, float64, string, []any or map[string]any.
func decodedJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

// jsonKind names v's kind in JSON's terms (string, number, boolean, null,
// object, array), or its Go type when it has none.
func jsonKind(v any) string {
	if _, num := toFloat(v); num {
		return "number"
	}
	if v == nil {
		return "null"
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

// ResolveParams returns a run's params: name → value, from the values given
// (nil = none) and the declarations decls. A given value must be of its
// param's type (strings, bools; numbers as float64, json.Number or a Go
// integer, held as float64, finite; json anything encoding/json encodes,
// held as it decodes), and its text (ParamEnv) at most MaxEnvValueBytes; a
// param not given takes its default, or is absent when it has none. Errors,
// sorted by field, name `<prefix>.<name>`: a value of the wrong type, a
// name the workflow does not declare, a required param not given. On error
// the values are nil; else they are a non-nil map.
func ResolveParams(decls []Param, given map[string]any, prefix string) (map[string]any, []FieldError) {
	var errs []FieldError
	field := func(name string) string {
		if prefix == "" {
			return name
		}
		return prefix + "." + name
	}
	values := make(map[string]any, len(decls))
	for _, p := range decls {
		raw, ok := given[p.Name]
		switch {
		case !ok && p.Required:
			errs = append(errs, FieldError{field(p.Name), "is required"})
			continue
		case !ok && p.Default == nil:
			continue
		case !ok:
			raw = p.Default
		}
		v, msg := p.value(raw)
		if msg != "" {
			errs = append(errs, FieldError{field(p.Name), msg})
			continue
		}
		values[p.Name] = v
	}
	for _, name := range slices.Sorted(maps.Keys(given)) {
		if !slices.ContainsFunc(decls, func(p Param) bool { return p.Name == name }) {
			errs = append(errs, FieldError{field(name), "unknown param; the workflow declares " + declaredNames(decls)})
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
		return nil, errs
	}
	return values, nil
}

// declaredNames lists the params' names in declaration order, or "none".
func declaredNames(decls []Param) string {
	names := make([]string, len(decls))
	for i, p := range decls {
		names[i] = p.Name
	}
	return listOr(names)
}

// ParamEnv returns the environment variables the params values (as
// ResolveParams returns them) give a task step: name → text, for each
// declared param that has a value. The declared type decides the text: a
// string as is; a number in decimal without exponent, an integer without
// ".0" (strconv 'f', -1); a boolean "true" or "false"; a json param as
// compact JSON, HTML characters unescaped (a json string keeps its quotes).
// Nil when no param has a value.
func ParamEnv(decls []Param, values map[string]any) map[string]string {
	var env map[string]string
	for _, p := range decls {
		v, ok := values[p.Name]
		if !ok {
			continue
		}
		if env == nil {
			env = make(map[string]string, len(values))
		}
		env[p.Name] = paramText(p.Type, v)
	}
	return env
}

// paramText is a value's text as ParamEnv gives it; a value that is not of
// typ is given as compact JSON.
func paramText(typ string, v any) string {
	switch x := v.(type) {
	case string:
		if typ != ParamJSON {
			return x
		}
	case bool:
		if typ != ParamJSON {
			return strconv.FormatBool(x)
		}
	case float64:
		if typ != ParamJSON {
			return strconv.FormatFloat(x, 'f', -1, 64)
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// StepsWithParams returns the steps a run of w with the params values (as
// ResolveParams returns them) executes, as their actions keep them: a copy
// of w.Steps in which every task step's Env also holds ParamEnv(w.Params,
// values), the params winning over a variable of the same name (which
// Validate rejects), and a for_each's items are left out (the run's spec
// keeps them: StaticItems), so that no statement that reads an action's
// step carries up to MaxForEachItems items. Suspend and approval steps run
// no process, nor do workflow steps (their child takes params of its
// own), and are copied unchanged. w is not modified; when no param
// has a value and no step lists items the result is w.Steps itself.
func (w WorkflowSpec) StepsWithParams(values map[string]any) []Step {
	penv := ParamEnv(w.Params, values)
	lists := slices.ContainsFunc(w.Steps, func(s Step) bool { return s.ForEach != nil && s.ForEach.Items != nil })
	if len(penv) == 0 && !lists {
		return w.Steps
	}
	steps := slices.Clone(w.Steps)
	for i, s := range steps {
		if s.ForEach != nil && s.ForEach.Items != nil {
			f := *s.ForEach
			f.Items = nil
			steps[i].ForEach = &f
		}
		if !s.RunsProcess() || len(penv) == 0 {
			continue
		}
		env := make(map[string]string, len(s.Env)+len(penv))
		maps.Copy(env, s.Env)
		maps.Copy(env, penv)
		steps[i].Env = env
	}
	return steps
}

// StaticItems returns the items the spec lists for step's for_each (nil
// when its list comes from an output or is empty, or there is no such
// step): an action's step holds no items (StepsWithParams).
func (w WorkflowSpec) StaticItems(step string) []any {
	if i := w.index(step); i >= 0 && w.Steps[i].ForEach != nil && w.Steps[i].ForEach.Items != nil {
		return *w.Steps[i].ForEach.Items
	}
	return nil
}
