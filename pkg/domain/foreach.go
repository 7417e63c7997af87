package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Limits of a for_each.
const (
	// MaxForEachItems bounds the items of one for_each: its tasks.
	MaxForEachItems = 10000
	// DefaultForEachAs is the environment variable an item arrives as.
	DefaultForEachAs = "ITEM"
)

// ForEach fans a step out over a list known when the step starts (Argo's
// withParam, Flyte's map tasks): a task step gets one task per item, a
// workflow step one child run per item, the task's or child's index the
// item's. The list is Items, or the JSON array an earlier step wrote as
// its output From ("step.output"); exactly one is set (Items may be an
// empty list). Each task gets its item as the environment variable As
// (default ITEM) and the file $CAPSTAN_INPUTS_DIR/<As>; each child gets it
// as its template's param As: the string itself, or its compact JSON
// (ItemValue). MaxParallel, when set, bounds how many of the step's tasks
// are ASSIGNED, BUILDING or RUNNING at once, or how many of its children
// have not ended.
type ForEach struct {
	From        string `json:"from,omitempty"`
	Items       *[]any `json:"items,omitempty"`
	As          string `json:"as,omitempty"`
	MaxParallel *int   `json:"max_parallel,omitempty"`
}

// EnvName returns As, default DefaultForEachAs.
func (f ForEach) EnvName() string {
	if f.As == "" {
		return DefaultForEachAs
	}
	return f.As
}

// Producer returns the step and the output From names ("" for Items).
func (f ForEach) Producer() (step, output string) {
	step, output, _ = strings.Cut(f.From, ".")
	return step, output
}

// ForEachItems parses raw, the value of a for_each's from output, as the
// list of items: a JSON array of at most MaxForEachItems values (numbers
// kept as written). Errors name what raw is instead.
func ForEachItems(raw string) ([]any, error) {
	d := json.NewDecoder(strings.NewReader(raw))
	d.UseNumber()
	var items []any
	if err := d.Decode(&items); err != nil || items == nil {
		return nil, fmt.Errorf("is not a JSON array: %s", excerpt(raw))
	}
	if d.More() {
		return nil, fmt.Errorf("is not a JSON array: text follows the array")
	}
	if len(items) > MaxForEachItems {
		return nil, fmt.Errorf("has %d items; at most %d", len(items), MaxForEachItems)
	}
	return items, nil
}

// ItemValue is how an item reaches its task: a string as it is, anything
// else as compact JSON without HTML escaping ({"a":1}, 3, true, null).
func ItemValue(item any) string {
	if s, ok := item.(string); ok {
		return s
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(item); err != nil {
		return fmt.Sprint(item)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ItemValues returns ItemValue of each item, in order.
func ItemValues(items []any) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = ItemValue(it)
	}
	return out
}

// excerpt is the start of a value for a message: at most 60 bytes, quoted.
func excerpt(v string) string {
	if len(v) > 60 {
		v = v[:60] + "…"
	}
	return strconv.Quote(v)
}

// ForEachSlotPrefix starts the step concurrency key that carries a
// for_each's max_parallel (ForEachSlotKey).
const ForEachSlotPrefix = "for_each:"

// ForEachSlotKey is the step concurrency key a for_each step's tasks of
// one generation share when it sets max_parallel: its slots are those of
// this step of this run alone.
func ForEachSlotKey(run, action string, generation int) string {
	return ForEachSlotPrefix + run + "/" + action + "/" + strconv.Itoa(generation)
}

// validateForEach checks the form of a step's for_each (what From names is
// checked with the whole spec, validateFlow).
func (s Step) validateForEach() []FieldError {
	f := s.ForEach
	if f == nil {
		return nil
	}
	var errs []FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, FieldError{Field: ".for_each" + field, Message: fmt.Sprintf(format, a...)})
	}
	switch {
	case s.Kind != KindTask && s.Kind != KindWorkflow:
		add("", "only a task or workflow step takes it; this step is a %s", s.Kind)
	case (f.From == "") == (f.Items == nil):
		add("", "takes exactly one of from and items")
	case f.From != "":
		if step, output := f.Producer(); !ValidName(step) || !outputName.MatchString(output) {
			add(".from", "must be \"<step>.<output>\"; got %q", f.From)
		}
	case len(*f.Items) > MaxForEachItems:
		add(".items", "has %d items; at most %d", len(*f.Items), MaxForEachItems)
	}
	as := f.EnvName()
	switch {
	case s.Kind == KindWorkflow:
		if msg := paramNameProblem(as); msg != "" {
			add(".as", "names the child's param each item is given as: %s", msg)
		} else if _, ok := s.Params[as]; ok {
			add(".as", "%q is also given in params", as)
		} else if slices.ContainsFunc(s.Inputs, func(in Input) bool { return in.As == as }) {
			add(".as", "%q is also an input's name", as)
		}
	case !envName.MatchString(as):
		add(".as", "is not a valid environment variable name: %q", as)
	case strings.HasPrefix(as, ReservedEnvPrefix):
		add(".as", "names starting with %s are reserved", ReservedEnvPrefix)
	case s.Env[as] != "" || s.SecretEnv[as] != "":
		add(".as", "%q is also set in env", as)
	case slices.ContainsFunc(s.Inputs, func(in Input) bool { return in.As == as }):
		add(".as", "%q is also an input's name", as)
	}
	if p := f.MaxParallel; p != nil && (*p < 1 || *p > MaxForEachItems) {
		add(".max_parallel", "must be between 1 and %d, got %d", MaxForEachItems, *p)
	}
	if p := f.MaxParallel; p != nil && s.Concurrency != nil {
		add(".max_parallel", "a step takes max_parallel or concurrency, not both")
	}
	if s.Replicas != nil && *s.Replicas != 1 {
		errs = append(errs, FieldError{".replicas", "a for_each step has a task per item; it takes no replicas"})
	}
	if s.Cache != nil && s.Cache.Serializable {
		errs = append(errs, FieldError{".cache.serializable",
			"a for_each step looks each item's entry up alone; it cannot be serializable"})
	}
	return errs
}
