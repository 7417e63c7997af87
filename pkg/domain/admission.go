package domain

import (
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
)

// Concurrency strategies (Hatchet's limit strategies).
const (
	// StrategyQueue (the default): a run over the limit waits QUEUED, FIFO
	// within its key.
	StrategyQueue = "queue"
	// StrategyCancelInProgress: the new run starts once the oldest running
	// run of its key, aborted with reason AbortReasonConcurrency, has
	// stopped.
	StrategyCancelInProgress = "cancel_in_progress"
	// StrategyCancelNewest: a run over the limit ends ABORTED at once.
	StrategyCancelNewest = "cancel_newest"
)

// Strategies lists the concurrency strategies.
var Strategies = []string{StrategyQueue, StrategyCancelInProgress, StrategyCancelNewest}

// AbortReasonConcurrency is the abort reason of a run a concurrency
// strategy ends or cancels.
const AbortReasonConcurrency = "concurrency"

// Limits of admission fields.
const (
	// MaxKeyBytes bounds an evaluated key.
	MaxKeyBytes = 255
	// MaxSlots bounds max_runs and max_tasks.
	MaxSlots = 100_000
	// MaxRateLimits bounds the rate limits one step takes.
	MaxRateLimits = 8
)

// Concurrency is a spec's run-level concurrency (Hatchet's concurrency
// groups): at most MaxRuns runs of one Key hold a slot at a time.
type Concurrency struct {
	// Key is a CEL string expression over params (`params.environment`;
	// a constant such as `"deploy"` is one key for every run).
	Key string `json:"key"`
	// MaxRuns is how many runs of a key hold a slot at a time, ≥ 1.
	MaxRuns int `json:"max_runs"`
	// Strategy is StrategyQueue (""), StrategyCancelInProgress or
	// StrategyCancelNewest.
	Strategy string `json:"strategy,omitempty"`
}

// StrategyOrDefault returns Strategy, StrategyQueue when unset.
func (c Concurrency) StrategyOrDefault() string {
	if c.Strategy == "" {
		return StrategyQueue
	}
	return c.Strategy
}

// StepConcurrency limits a step's tasks across runs (Airflow's pools,
// Argo's semaphores): at most MaxTasks tasks of one Key are ASSIGNED,
// BUILDING or RUNNING at a time.
type StepConcurrency struct {
	// Key is a CEL string expression over params, ITEM and index.
	Key string `json:"key"`
	// MaxTasks is how many tasks of a key run at a time, ≥ 1.
	MaxTasks int `json:"max_tasks"`
}

// RateLimitUse is one rate limit a step's tasks take tokens of (Hatchet's
// rate limits): Units tokens (default 1) of the project's rate limit Name,
// from the bucket of Key when set (a CEL string expression over params,
// ITEM and index: one bucket per value) or the limit's one bucket.
type RateLimitUse struct {
	Name  string `json:"name"`
	Units *int   `json:"units,omitempty"`
	Key   string `json:"key,omitempty"`
}

// UnitsOrDefault returns Units, 1 when unset.
func (r RateLimitUse) UnitsOrDefault() int {
	if r.Units == nil {
		return 1
	}
	return *r.Units
}

// KeyVars is what a key expression reads: the run's params (as
// ResolveParams returns them; nil reads as none) and, for a task's key,
// the task's ITEM (nil: the step fans out over no items) and index.
type KeyVars struct {
	Params map[string]any
	Item   any
	Index  int
}

// KeyExpr is a compiled key expression. It is safe for concurrent use.
type KeyExpr struct {
	prog cel.Program
}

// keyEnvs declare what run keys (params) and task keys (params, ITEM,
// index) read.
var (
	runKeyEnv = sync.OnceValues(func() (*cel.Env, error) {
		return cel.NewEnv(cel.Variable("params", cel.MapType(cel.StringType, cel.DynType)),
			cel.CrossTypeNumericComparisons(true))
	})
	taskKeyEnv = sync.OnceValues(func() (*cel.Env, error) {
		return cel.NewEnv(cel.Variable("params", cel.MapType(cel.StringType, cel.DynType)),
			cel.Variable("ITEM", cel.DynType), cel.Variable("index", cel.IntType),
			cel.CrossTypeNumericComparisons(true))
	})
)

// CompileRunKey compiles a run-level key expression (over params).
// Errors: compileExpr's (too long, does not compile, may cost too much),
// or it is not a string (nor dyn, checked when evaluated).
func CompileRunKey(expr string) (*KeyExpr, error) { return compileKey("run:", runKeyEnv, expr) }

// CompileTaskKey compiles a task-level key expression (over params, ITEM
// and index). Errors: as CompileRunKey's.
func CompileTaskKey(expr string) (*KeyExpr, error) { return compileKey("task:", taskKeyEnv, expr) }

func compileKey(kind string, envOf func() (*cel.Env, error), expr string) (*KeyExpr, error) {
	if x, ok := exprs.get(kind + expr); ok {
		return x.(*KeyExpr), nil
	}
	env, err := envOf()
	if err != nil {
		return nil, err
	}
	checked, prog, err := compileExpr(env, expr)
	if err != nil {
		return nil, err
	}
	if t := checked.OutputType(); !t.IsExactType(cel.StringType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("must be a string expression, is %s", t)
	}
	x := &KeyExpr{prog: prog}
	exprs.put(kind+expr, x)
	return x, nil
}

// Eval evaluates the key, a decision of its own (exprBudget). An empty
// string is the key "". Errors: the expression failed at run time (it
// read a param the run does not have, or exceeded its limits:
// ErrExprLimit, wrapped), its value is not a string, or it is longer than
// MaxKeyBytes.
func (k *KeyExpr) Eval(v KeyVars) (string, error) {
	var b exprBudget
	defer b.done()
	return k.eval(&b, v)
}

// eval is Eval within budget b.
func (k *KeyExpr) eval(b *exprBudget, v KeyVars) (string, error) {
	params := v.Params
	if params == nil {
		params = map[string]any{}
	}
	out, err := b.eval(k.prog, map[string]any{"params": params, "ITEM": v.Item, "index": v.Index})
	if err != nil {
		return "", fmt.Errorf("fails: %s", oneLine(err.Error()))
	}
	s, ok := out.(types.String)
	if !ok {
		return "", fmt.Errorf("is a %s, not a string", out.Type().TypeName())
	}
	if len(s) > MaxKeyBytes {
		return "", fmt.Errorf("is %d bytes; at most %d", len(s), MaxKeyBytes)
	}
	return string(s), nil
}

// AdmissionKeys are a run's evaluated keys: its concurrency key (nil when
// its spec has no concurrency) and its fairness key ("" when its spec has
// no fairness_key).
type AdmissionKeys struct {
	Concurrency *string
	Fairness    string
}

// AdmissionKeys evaluates the spec's concurrency key and fairness key over
// a run's resolved params. Errors, FieldErrors naming prefix +
// ".concurrency.key" or prefix + ".fairness_key": the expression does not
// compile or fails (KeyExpr.Eval). The two are one decision (exprBudget).
func (w WorkflowSpec) AdmissionKeys(params map[string]any, prefix string) (AdmissionKeys, []FieldError) {
	var keys AdmissionKeys
	var errs []FieldError
	var b exprBudget
	defer b.done()
	eval := func(field, expr string) string {
		x, err := CompileRunKey(expr)
		if err == nil {
			var key string
			if key, err = x.eval(&b, KeyVars{Params: params}); err == nil {
				return key
			}
		}
		errs = append(errs, FieldError{prefix + field, err.Error()})
		return ""
	}
	if w.Concurrency != nil {
		key := eval(".concurrency.key", w.Concurrency.Key)
		keys.Concurrency = &key
	}
	if w.FairnessKey != "" {
		keys.Fairness = eval(".fairness_key", w.FairnessKey)
	}
	if len(errs) > 0 {
		return AdmissionKeys{}, errs
	}
	return keys, nil
}

// validateConcurrency checks a spec's concurrency and fairness_key.
func (w WorkflowSpec) validateConcurrency() []FieldError {
	var errs []FieldError
	if c := w.Concurrency; c != nil {
		if _, err := CompileRunKey(c.Key); err != nil {
			errs = append(errs, FieldError{".concurrency.key", err.Error()})
		}
		if c.MaxRuns < 1 || c.MaxRuns > MaxSlots {
			errs = append(errs, FieldError{".concurrency.max_runs", fmt.Sprintf("must be between 1 and %d, got %d", MaxSlots, c.MaxRuns)})
		}
		if c.Strategy != "" && !slices.Contains(Strategies, c.Strategy) {
			errs = append(errs, FieldError{".concurrency.strategy", fmt.Sprintf("must be one of queue, cancel_in_progress, cancel_newest; got %q", c.Strategy)})
		}
	}
	if w.FairnessKey != "" {
		if _, err := CompileRunKey(w.FairnessKey); err != nil {
			errs = append(errs, FieldError{".fairness_key", err.Error()})
		}
	}
	return errs
}

// validateAdmission checks a step's concurrency and rate_limits (the
// names' existence is the API's to check: they are the project's).
func (s Step) validateAdmission() []FieldError {
	var errs []FieldError
	if c := s.Concurrency; c != nil {
		if _, err := CompileTaskKey(c.Key); err != nil {
			errs = append(errs, FieldError{".concurrency.key", err.Error()})
		}
		if c.MaxTasks < 1 || c.MaxTasks > MaxSlots {
			errs = append(errs, FieldError{".concurrency.max_tasks", fmt.Sprintf("must be between 1 and %d, got %d", MaxSlots, c.MaxTasks)})
		}
	}
	if len(s.RateLimits) > MaxRateLimits {
		errs = append(errs, FieldError{".rate_limits", fmt.Sprintf("has %d rate limits; at most %d", len(s.RateLimits), MaxRateLimits)})
	}
	seen := map[string]bool{}
	for i, r := range s.RateLimits {
		at := ".rate_limits[" + strconv.Itoa(i) + "]"
		switch {
		case !ValidName(r.Name):
			errs = append(errs, FieldError{at + ".name", fmt.Sprintf("must be a rate limit name (1-63 of [a-z0-9-]); got %q", clipText(r.Name))})
		case seen[r.Name]:
			errs = append(errs, FieldError{at + ".name", fmt.Sprintf("rate limit %q is taken twice", r.Name)})
		}
		seen[r.Name] = true
		if u := r.UnitsOrDefault(); u < 1 || u > MaxSlots {
			errs = append(errs, FieldError{at + ".units", fmt.Sprintf("must be between 1 and %d, got %d", MaxSlots, u)})
		}
		if r.Key != "" {
			if _, err := CompileTaskKey(r.Key); err != nil {
				errs = append(errs, FieldError{at + ".key", err.Error()})
			}
		}
	}
	return errs
}

// LineRun is a run of one concurrency key, for DecideAdmission: a holder
// (admitted, its slot held while it is live or its processes may still
// run) or a candidate (waiting, deciding now).
type LineRun struct {
	Run string
	// Ahead counts the key's waiting runs before this one in line (a
	// candidate's; the line is oldest first).
	Ahead int
	// Newer counts the key's unfinished runs, waiting or holding, after
	// this one in line.
	Newer int
	// Stopping marks a holder that has ended or is aborting and holds its
	// slot until its processes are gone.
	Stopping bool
}

// AdmissionLine is what DecideAdmission decides from: one key's limit and
// strategy, its holders and its candidates (in line order).
type AdmissionLine struct {
	MaxRuns    int
	Strategy   string
	Holders    []LineRun
	Candidates []LineRun
}

// Admission is DecideAdmission's decision.
type Admission struct {
	// Admit lists the candidates that take a slot now.
	Admit []string
	// Wait maps each candidate left waiting to its place in line once the
	// admitted have left it (1 is first).
	Wait map[string]int
	// End lists the candidates that end ABORTED at once, reason
	// AbortReasonConcurrency: over the limit under cancel_newest, or
	// superseded by max_runs newer runs under cancel_in_progress.
	End []string
	// Cancel lists the holders to abort, reason AbortReasonConcurrency
	// (cancel_in_progress): each has max_runs newer unfinished runs.
	Cancel []string
}

// DecideAdmission decides one key's candidates (Hatchet's concurrency
// strategies). A slot is free while fewer than MaxRuns holders hold one;
// a stopping holder (an aborted run whose processes may still run) holds
// its slot, so no run starts beside a run that has not stopped.
//   - queue: a candidate with fewer waiting runs ahead than free slots is
//     admitted (FIFO within the key); the others wait at place Ahead+1.
//   - cancel_newest: the same, but a candidate that cannot be admitted
//     ends at once.
//   - cancel_in_progress: the MaxRuns newest unfinished runs of the key
//     are the ones to run: an older candidate ends at once, an older
//     holder that is not stopping is cancelled, and a candidate among the
//     newest is admitted once the holders, with the newest waiting runs
//     ahead of it, leave it a slot.
func DecideAdmission(l AdmissionLine) Admission {
	out := Admission{Wait: map[string]int{}}
	free := l.MaxRuns - len(l.Holders)
	for _, c := range l.Candidates {
		ahead := c.Ahead
		if l.Strategy == StrategyCancelInProgress {
			if c.Newer >= l.MaxRuns {
				out.End = append(out.End, c.Run)
				continue
			}
			ahead = min(ahead, l.MaxRuns-1-c.Newer) // older waiting runs beyond these are superseded
		}
		switch {
		case ahead < free:
			out.Admit = append(out.Admit, c.Run)
		case l.Strategy == StrategyCancelNewest:
			out.End = append(out.End, c.Run)
		default: // the runs admitted now were ahead of it: they leave the line
			out.Wait[c.Run] = c.Ahead + 1 - len(out.Admit)
		}
	}
	if l.Strategy == StrategyCancelInProgress {
		for _, h := range l.Holders {
			if !h.Stopping && h.Newer >= l.MaxRuns {
				out.Cancel = append(out.Cancel, h.Run)
			}
		}
	}
	return out
}

// WaitReason is the pending_reason of a run waiting for a slot of key:
// `concurrency key "prod": 3rd in line for 2 slots`.
func WaitReason(key string, place, maxRuns int) string {
	slots := "slots"
	if maxRuns == 1 {
		slots = "slot"
	}
	return fmt.Sprintf("concurrency key %q: %s in line for %d %s", key, ordinal(place), maxRuns, slots)
}

// ordinal renders 1st, 2nd, 3rd, 4th, 11th, 21st…
func ordinal(n int) string {
	suffix := "th"
	switch n % 100 {
	case 11, 12, 13:
	default:
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}
