package domain

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// Resources is capacity offered by a worker or requested by one task. A zero
// field asks for nothing; a worker offering zero of a resource did not declare
// it and is not limited by it.
type Resources struct {
	CPUMillis   int64 `json:"cpu_millis,omitempty"`
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// Priority is a task's band. Higher bands are placed first and may preempt
// lower ones; production is never preempted.
type Priority int

// Priority bands.
const (
	PriorityBatch       Priority = 0
	PriorityInteractive Priority = 1
	PriorityProduction  Priority = 2
)

var priorityNames = map[string]Priority{"batch": PriorityBatch, "interactive": PriorityInteractive, "production": PriorityProduction}

// ParsePriority maps a band name to its Priority; unknown names are
// interactive, the default.
func ParsePriority(name string) Priority {
	if p, ok := priorityNames[name]; ok {
		return p
	}
	return PriorityInteractive
}

// String names the band.
func (p Priority) String() string {
	for n, v := range priorityNames {
		if v == p {
			return n
		}
	}
	return "interactive"
}

// CanPreempt reports whether a task of band p may evict a task of band
// victim: only a strictly lower band, and never production.
func (p Priority) CanPreempt(victim Priority) bool {
	return victim < p && victim != PriorityProduction
}

// Constraint operators.
const (
	OpEQ        = "EQ"
	OpNE        = "NE"
	OpExists    = "EXISTS"
	OpNotExists = "NOT_EXISTS"
	OpGT        = "GT"
	OpGE        = "GE"
	OpLT        = "LT"
	OpLE        = "LE"
	OpIn        = "IN"
)

// Constraint selects workers by one label: Key Op Value (or Values for IN).
// GT/GE/LT/LE compare numbers; a label that is not a number fails them.
type Constraint struct {
	Key    string   `json:"key"`
	Op     string   `json:"op"`
	Value  string   `json:"value,omitempty"`
	Values []string `json:"values,omitempty"`
}

// String renders the constraint as "gpu=EXISTS", "zone EQ a", "tier IN [a b]".
func (c Constraint) String() string {
	switch c.Op {
	case OpExists, OpNotExists:
		return c.Key + "=" + c.Op
	case OpIn:
		return fmt.Sprintf("%s IN %v", c.Key, c.Values)
	}
	return c.Key + " " + c.Op + " " + c.Value
}

func (c Constraint) validate() string {
	if c.Key == "" {
		return "key is required"
	}
	switch c.Op {
	case OpExists, OpNotExists:
		return ""
	case OpEQ, OpNE:
		return ""
	case OpGT, OpGE, OpLT, OpLE:
		if _, err := strconv.ParseFloat(c.Value, 64); err != nil {
			return fmt.Sprintf("%s needs a numeric value, got %q", c.Op, c.Value)
		}
		return ""
	case OpIn:
		if len(c.Values) == 0 {
			return "IN needs values"
		}
		return ""
	}
	return fmt.Sprintf("unknown op %q; known: EQ, NE, EXISTS, NOT_EXISTS, GT, GE, LT, LE, IN", c.Op)
}

// Matches reports whether labels satisfy the constraint.
func (c Constraint) Matches(labels map[string]string) bool {
	v, ok := labels[c.Key]
	switch c.Op {
	case OpExists:
		return ok
	case OpNotExists:
		return !ok
	case OpEQ:
		return ok && v == c.Value
	case OpNE:
		return !ok || v != c.Value
	case OpIn:
		return ok && slices.Contains(c.Values, v)
	}
	if !ok {
		return false
	}
	have, err1 := strconv.ParseFloat(v, 64)
	want, err2 := strconv.ParseFloat(c.Value, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	switch c.Op {
	case OpGT:
		return have > want
	case OpGE:
		return have >= want
	case OpLT:
		return have < want
	case OpLE:
		return have <= want
	}
	return false
}

// TaskRequest is what placing one task needs.
type TaskRequest struct {
	Resources   Resources
	Constraints []Constraint
	Priority    Priority
	// Plugin is the task's plugin: one of OptionalPlugins is an implicit
	// constraint PluginLabel(Plugin)="true".
	Plugin string
}

// WorkerView is a worker as placement sees it: labels and what is free.
type WorkerView struct {
	ID     string
	Labels map[string]string
	// Capacity is what the worker offers (zero fields: undeclared, unlimited).
	Capacity Resources
	// Used is what its live attempts hold.
	Used Resources
	// FreeSlots is how many more attempts it may run.
	FreeSlots int
}

// Free returns the worker's unused resources.
func (w WorkerView) Free() Resources {
	return Resources{CPUMillis: w.Capacity.CPUMillis - w.Used.CPUMillis, MemoryBytes: w.Capacity.MemoryBytes - w.Used.MemoryBytes}
}

// matches reports whether the worker runs r's plugin and satisfies every
// constraint of r, returning the first that fails (the plugin's implicit
// one first).
func (w WorkerView) matches(r TaskRequest) (Constraint, bool) {
	if !w.RunsPlugin(r.Plugin) {
		return Constraint{Key: PluginLabel(r.Plugin), Op: OpEQ, Value: "true"}, false
	}
	for _, c := range r.Constraints {
		if !c.Matches(w.Labels) {
			return c, false
		}
	}
	return Constraint{}, true
}

// fits reports whether r fits in what the worker has free.
func (w WorkerView) fits(r Resources) bool {
	if w.FreeSlots <= 0 {
		return false
	}
	free := w.Free()
	cpuOK := w.Capacity.CPUMillis == 0 || r.CPUMillis <= free.CPUMillis
	memOK := w.Capacity.MemoryBytes == 0 || r.MemoryBytes <= free.MemoryBytes
	return cpuOK && memOK
}

// take records that r was placed on the worker.
func (w *WorkerView) take(r Resources) {
	w.Used.CPUMillis += r.CPUMillis
	w.Used.MemoryBytes += r.MemoryBytes
	w.FreeSlots--
}

// Place picks the worker for one task: among workers that run its plugin,
// satisfy every constraint and have the resources and a slot free, the one
// with the most free slots (spreading load), first by index on ties. It
// returns -1 and a pending_reason when none fits, e.g. "no worker runs
// plugin container", "no worker matches constraint gpu=EXISTS" or
// "insufficient memory: need 8.0 GiB, largest free 2.0 GiB".
func Place(r TaskRequest, ws []WorkerView) (int, string) {
	best, runs := -1, 0
	var matching []WorkerView
	var failed Constraint
	for i, w := range ws {
		if w.RunsPlugin(r.Plugin) {
			runs++
		}
		c, ok := w.matches(r)
		if !ok {
			failed = c
			continue
		}
		matching = append(matching, w)
		if w.fits(r.Resources) && (best < 0 || w.FreeSlots > ws[best].FreeSlots) {
			best = i
		}
	}
	switch {
	case best >= 0:
		return best, ""
	case len(ws) == 0:
		return -1, "no worker is registered and alive"
	case runs == 0:
		return -1, "no worker runs plugin " + r.Plugin
	case len(matching) == 0:
		return -1, "no worker matches constraint " + failed.String()
	}
	return -1, shortfall(r.Resources, matching)
}

// shortfall explains why no matching worker fits r.
func shortfall(r Resources, ws []WorkerView) string {
	var maxCPU, maxMem int64 = -1, -1
	slots := 0
	for _, w := range ws {
		if w.FreeSlots <= 0 {
			continue // a full worker's free memory is no use
		}
		slots++
		f := w.Free()
		if w.Capacity.CPUMillis == 0 {
			f.CPUMillis = r.CPUMillis
		}
		if w.Capacity.MemoryBytes == 0 {
			f.MemoryBytes = r.MemoryBytes
		}
		maxCPU, maxMem = max(maxCPU, f.CPUMillis), max(maxMem, f.MemoryBytes)
	}
	switch {
	case slots == 0:
		return fmt.Sprintf("no free slot on the %d matching worker(s)", len(ws))
	case r.MemoryBytes > maxMem:
		return fmt.Sprintf("insufficient memory: need %s, largest free %s", bytesString(r.MemoryBytes), bytesString(max(maxMem, 0)))
	case r.CPUMillis > maxCPU:
		return fmt.Sprintf("insufficient cpu: need %dm, largest free %dm", r.CPUMillis, max(maxCPU, 0))
	}
	return "no matching worker has both the cpu and the memory free"
}

func bytesString(b int64) string {
	const unit = 1024
	if b < unit {
		return strconv.FormatInt(b, 10) + " B"
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 4; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTP"[exp])
}

// PlaceGang places every task of a coscheduled job or none: it returns one
// worker index per request, or nil and the reason of the first task that
// cannot be placed. ws is updated only on success.
func PlaceGang(rs []TaskRequest, ws []WorkerView) ([]int, string) {
	trial := slices.Clone(ws)
	out := make([]int, len(rs))
	for i, r := range rs {
		j, reason := Place(r, trial)
		if j < 0 {
			return nil, fmt.Sprintf("coscheduled: %d of %d tasks fit; %s", i, len(rs), reason)
		}
		trial[j].take(r.Resources)
		out[i] = j
	}
	copy(ws, trial)
	return out, ""
}

// Take records a placement of r on ws[i] (after Place chose it).
func Take(ws []WorkerView, i int, r Resources) { ws[i].take(r) }

// Running is a live attempt that preemption may evict.
type Running struct {
	AttemptID int64
	Worker    int
	Priority  Priority
	Resources Resources
	// Started is false while the attempt is still ASSIGNED: evicting it is free.
	Started bool
	// Order breaks ties: larger is more recent (less work lost when evicted).
	Order int64
}

// PickVictims chooses which running attempts to evict so that r fits on one
// worker (Iris's preemption pass): only workers that satisfy r's constraints,
// only victims of a band r may preempt, the fewest victims, preferring
// not-yet-started ones (free), then the lowest band, then the most recent.
// It returns the worker index and the victims, or -1 when no eviction helps.
func PickVictims(r TaskRequest, ws []WorkerView, running []Running) (int, []Running) {
	bestWorker, bestVictims := -1, []Running(nil)
	for i, w := range ws {
		if _, ok := w.matches(r); !ok {
			continue
		}
		var cands []Running
		for _, x := range running {
			if x.Worker == i && r.Priority.CanPreempt(x.Priority) {
				cands = append(cands, x)
			}
		}
		slices.SortFunc(cands, func(a, b Running) int {
			switch {
			case a.Started != b.Started:
				if !a.Started {
					return -1
				}
				return 1
			case a.Priority != b.Priority:
				return cmp.Compare(a.Priority, b.Priority)
			}
			return cmp.Compare(b.Order, a.Order)
		})
		trial := w
		var victims []Running
		for _, v := range cands {
			if trial.fits(r.Resources) {
				break
			}
			trial.Used.CPUMillis -= v.Resources.CPUMillis
			trial.Used.MemoryBytes -= v.Resources.MemoryBytes
			trial.FreeSlots++
			victims = append(victims, v)
		}
		if len(victims) == 0 || !trial.fits(r.Resources) {
			continue
		}
		if bestWorker < 0 || cheaper(victims, bestVictims) {
			bestWorker, bestVictims = i, victims
		}
	}
	return bestWorker, bestVictims
}

// cheaper reports whether evicting a costs less than evicting b: fewer
// victims, then fewer started ones (an ASSIGNED eviction is free), then lower
// bands, then more recent ones (less work lost).
func cheaper(a, b []Running) bool {
	cost := func(vs []Running) (n, started int, bands, order int64) {
		for _, v := range vs {
			if v.Started {
				started++
			}
			bands += int64(v.Priority)
			order = max(order, v.Order)
		}
		return len(vs), started, bands, order
	}
	an, as, ab, ao := cost(a)
	bn, bs, bb, bo := cost(b)
	if c := cmp.Compare(an, bn); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(as, bs); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(ab, bb); c != 0 {
		return c < 0
	}
	return ao > bo
}
