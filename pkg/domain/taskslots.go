package domain

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// TaskRateLimit is one rate limit a task takes tokens of when it is
// placed: Units tokens from the bucket of its evaluated Key ("" for the
// limit's one bucket) of the project's rate limit Name.
type TaskRateLimit struct {
	Name  string `json:"name"`
	Key   string `json:"key"`
	Units int    `json:"units"`
}

// TaskAdmission is a task's admission, evaluated when it is created: its
// step's concurrency key (nil: none) and max_tasks, and its rate limits.
type TaskAdmission struct {
	ConcurrencyKey *string
	ConcurrencyMax int
	RateLimits     []TaskRateLimit
}

// HasAdmission reports whether the step limits its tasks: a concurrency or
// a rate limit. A step without either costs its tasks no evaluation.
func (s Step) HasAdmission() bool { return s.Concurrency != nil || len(s.RateLimits) > 0 }

// TaskAdmissions evaluates the step's concurrency key and rate-limit keys
// for each of its n tasks (index 0 to n-1, ITEM nil) over the run's params;
// nil when the step has no admission (HasAdmission). A key that evaluates
// to "" is the key "". A key that fails is "" in the result, with a
// FieldError naming prefix + ".concurrency.key" or prefix +
// ".rate_limits[j].key" and the first index it fails at (one per field).
// The keys of the n tasks are one decision (exprBudget): past its budget
// every key left fails.
func (s Step) TaskAdmissions(params map[string]any, n int, prefix string) ([]TaskAdmission, []FieldError) {
	return s.taskAdmissions(params, nil, n, prefix)
}

// ItemAdmissions is TaskAdmissions for the tasks of a for_each step, one
// per item: each key sees its task's item as ITEM.
func (s Step) ItemAdmissions(params map[string]any, items []any, prefix string) ([]TaskAdmission, []FieldError) {
	return s.taskAdmissions(params, items, len(items), prefix)
}

func (s Step) taskAdmissions(params map[string]any, items []any, n int, prefix string) ([]TaskAdmission, []FieldError) {
	if !s.HasAdmission() {
		return nil, nil
	}
	out := make([]TaskAdmission, n)
	var errs []FieldError
	failed := map[string]bool{}
	var b exprBudget
	defer b.done()
	eval := func(field, expr string, idx int) string {
		x, err := CompileTaskKey(expr)
		if err == nil {
			var key string
			v := KeyVars{Params: params, Index: idx}
			if items != nil {
				v.Item = celItem(items[idx])
			}
			if key, err = x.eval(&b, v); err == nil {
				return key
			}
		}
		if !failed[field] {
			failed[field] = true
			errs = append(errs, FieldError{prefix + field, fmt.Sprintf("at task index %d: %s", idx, err)})
		}
		return ""
	}
	for i := range out {
		if c := s.Concurrency; c != nil {
			key := eval(".concurrency.key", c.Key, i)
			out[i].ConcurrencyKey, out[i].ConcurrencyMax = &key, c.MaxTasks
		}
		for j, r := range s.RateLimits {
			t := TaskRateLimit{Name: r.Name, Units: r.UnitsOrDefault()}
			if r.Key != "" {
				t.Key = eval(".rate_limits["+strconv.Itoa(j)+"].key", r.Key, i)
			}
			out[i].RateLimits = append(out[i].RateLimits, t)
		}
	}
	return out, errs
}

// SlotFree is the step-slot rule (Airflow's pools, Argo's semaphores): a
// task of a concurrency key whose step allows maxTasks may take a slot
// while fewer than maxTasks tasks of the key, across runs, are ASSIGNED,
// BUILDING or RUNNING (held, counted from the tasks, with those the same
// pass placed).
func SlotFree(held, maxTasks int) bool { return held < maxTasks }

// SlotWaitReason is the pending_reason of a task waiting for a slot of a
// concurrency key: `concurrency key "db-migrate": 1 of 1 running`, or for
// a for_each's max_parallel `for_each max_parallel 3: 3 running`.
func SlotWaitReason(key string, held, maxTasks int) string {
	if strings.HasPrefix(key, ForEachSlotPrefix) {
		return fmt.Sprintf("for_each max_parallel %d: %d running", maxTasks, held)
	}
	return fmt.Sprintf("concurrency key %q: %d of %d running", key, held, maxTasks)
}

// celItem is an item as CEL takes it: its numbers (json.Number, as
// ForEachItems keeps them) as int64 when whole, else float64, within lists
// and maps too.
func celItem(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = celItem(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = celItem(e)
		}
		return out
	}
	return v
}
