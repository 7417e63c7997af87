package domain_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

const (
	plMiB = int64(1) << 20
	plGiB = int64(1) << 30

	plBatch       = domain.PriorityBatch
	plInteractive = domain.PriorityInteractive
	plProduction  = domain.PriorityProduction
)

// plLabels is the label set the constraint table matches against.
var plLabels = map[string]string{
	"gpu":   "a100",
	"zone":  "us-east",
	"cores": "8",
	"ratio": "0.5",
	"tier":  "gold",
	"empty": "",
}

// plWorker builds a worker with the given free slots and labels (key, value
// pairs) and no declared capacity.
func plWorker(id string, slots int, kv ...string) domain.WorkerView {
	w := domain.WorkerView{ID: id, FreeSlots: slots, Labels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		w.Labels[kv[i]] = kv[i+1]
	}
	return w
}

// plWithCap sets the capacity and usage of w.
func plWithCap(w domain.WorkerView, capCPU, capMem, usedCPU, usedMem int64) domain.WorkerView {
	w.Capacity = domain.Resources{CPUMillis: capCPU, MemoryBytes: capMem}
	w.Used = domain.Resources{CPUMillis: usedCPU, MemoryBytes: usedMem}
	return w
}

// plCloneWorkers deep-copies workers (labels included) so a later comparison
// detects any mutation.
func plCloneWorkers(ws []domain.WorkerView) []domain.WorkerView {
	if ws == nil {
		return nil
	}
	out := make([]domain.WorkerView, len(ws))
	for i, w := range ws {
		out[i] = w
		if w.Labels != nil {
			out[i].Labels = make(map[string]string, len(w.Labels))
			for k, v := range w.Labels {
				out[i].Labels[k] = v
			}
		}
	}
	return out
}

// plMatchesAll is the test's own reading of "satisfies every constraint".
func plMatchesAll(cs []domain.Constraint, labels map[string]string) bool {
	for _, c := range cs {
		if !c.Matches(labels) {
			return false
		}
	}
	return true
}

// plFits is the test's own oracle for "r fits in what w has free": a free
// slot, and each declared (non-zero) capacity covers usage plus the request.
func plFits(w domain.WorkerView, r domain.Resources) bool {
	if w.FreeSlots <= 0 {
		return false
	}
	if w.Capacity.CPUMillis != 0 && w.Used.CPUMillis+r.CPUMillis > w.Capacity.CPUMillis {
		return false
	}
	if w.Capacity.MemoryBytes != 0 && w.Used.MemoryBytes+r.MemoryBytes > w.Capacity.MemoryBytes {
		return false
	}
	return true
}

// plEvict returns w with the victims' resources and slots released.
func plEvict(w domain.WorkerView, victims []domain.Running) domain.WorkerView {
	for _, v := range victims {
		w.Used.CPUMillis -= v.Resources.CPUMillis
		w.Used.MemoryBytes -= v.Resources.MemoryBytes
		w.FreeSlots++
	}
	return w
}

// plMayPreempt is the band rule written independently of CanPreempt: only a
// strictly lower band, never production.
func plMayPreempt(by, victim domain.Priority) bool {
	rank := map[domain.Priority]int{plBatch: 0, plInteractive: 1, plProduction: 2}
	return victim != plProduction && rank[victim] < rank[by]
}

// plIDs returns the attempt ids of victims, in order.
func plIDs(vs []domain.Running) []int64 {
	out := make([]int64, len(vs))
	for i, v := range vs {
		out[i] = v.AttemptID
	}
	return out
}

// ---------------------------------------------------------------------------
// Constraints

func TestConstraintMatches(t *testing.T) {
	t.Parallel()
	c := func(key, op, value string, values ...string) domain.Constraint {
		return domain.Constraint{Key: key, Op: op, Value: value, Values: values}
	}
	cases := []struct {
		name string
		c    domain.Constraint
		want bool
	}{
		{"EQ matches equal value", c("zone", domain.OpEQ, "us-east"), true},
		{"EQ rejects other value", c("zone", domain.OpEQ, "eu-west"), false},
		{"EQ is case-sensitive", c("zone", domain.OpEQ, "US-EAST"), false},
		{"EQ rejects missing label", c("region", domain.OpEQ, "us-east"), false},
		{"EQ empty value matches empty label", c("empty", domain.OpEQ, ""), true},
		{"EQ empty value does not match missing label", c("region", domain.OpEQ, ""), false},

		{"NE matches other value", c("zone", domain.OpNE, "eu-west"), true},
		{"NE rejects equal value", c("zone", domain.OpNE, "us-east"), false},
		{"NE matches missing label", c("region", domain.OpNE, "us-east"), true},

		{"EXISTS matches present label", c("gpu", domain.OpExists, ""), true},
		{"EXISTS matches present empty label", c("empty", domain.OpExists, ""), true},
		{"EXISTS rejects missing label", c("tpu", domain.OpExists, ""), false},
		{"EXISTS ignores value", c("gpu", domain.OpExists, "h100"), true},

		{"NOT_EXISTS matches missing label", c("tpu", domain.OpNotExists, ""), true},
		{"NOT_EXISTS rejects present label", c("gpu", domain.OpNotExists, ""), false},
		{"NOT_EXISTS rejects present empty label", c("empty", domain.OpNotExists, ""), false},

		{"GT true when greater", c("cores", domain.OpGT, "4"), true},
		{"GT false when equal", c("cores", domain.OpGT, "8"), false},
		{"GT false when less", c("cores", domain.OpGT, "16"), false},
		{"GT compares numbers not strings", c("cores", domain.OpGT, "10"), false},
		{"GT compares fractions", c("ratio", domain.OpGT, "0.25"), true},
		{"GT false on missing label", c("memory", domain.OpGT, "0"), false},
		{"GT false on non-numeric label", c("tier", domain.OpGT, "0"), false},
		{"GT false on empty label", c("empty", domain.OpGT, "-1"), false},
		{"GT false on non-numeric value", c("cores", domain.OpGT, "four"), false},

		{"GE true when equal", c("cores", domain.OpGE, "8"), true},
		{"GE true when greater", c("cores", domain.OpGE, "7.5"), true},
		{"GE false when less", c("cores", domain.OpGE, "9"), false},
		{"GE false on missing label", c("memory", domain.OpGE, "0"), false},
		{"GE false on non-numeric label", c("gpu", domain.OpGE, "0"), false},

		{"LT true when less", c("cores", domain.OpLT, "10"), true},
		{"LT accepts exponent values", c("cores", domain.OpLT, "1e1"), true},
		{"LT false when equal", c("cores", domain.OpLT, "8"), false},
		{"LT false when greater", c("cores", domain.OpLT, "2"), false},
		{"LT false on missing label", c("memory", domain.OpLT, "100"), false},
		{"LT false on non-numeric label", c("zone", domain.OpLT, "100"), false},

		{"LE true when equal", c("cores", domain.OpLE, "8"), true},
		{"LE true when less", c("ratio", domain.OpLE, "1"), true},
		{"LE false when greater", c("cores", domain.OpLE, "7"), false},
		{"LE false on missing label", c("memory", domain.OpLE, "100"), false},
		{"LE false on non-numeric label", c("tier", domain.OpLE, "100"), false},

		{"IN matches a listed value", c("tier", domain.OpIn, "", "silver", "gold"), true},
		{"IN rejects unlisted value", c("tier", domain.OpIn, "", "silver", "bronze"), false},
		{"IN is case-sensitive", c("tier", domain.OpIn, "", "GOLD"), false},
		{"IN rejects missing label", c("region", domain.OpIn, "", "us-east"), false},
		{"IN with no values matches nothing", c("tier", domain.OpIn, ""), false},
		{"IN ignores Value", c("tier", domain.OpIn, "gold", "silver"), false},

		{"unknown op matches nothing", c("zone", "LIKE", "us-east"), false},
		{"lower-case op is unknown", c("zone", "eq", "us-east"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.c.Matches(plLabels), "%s against %v", tc.c, plLabels)
		})
	}
}

func TestConstraintMatchesNilLabels(t *testing.T) {
	t.Parallel()
	require.True(t, domain.Constraint{Key: "gpu", Op: domain.OpNotExists}.Matches(nil))
	require.True(t, domain.Constraint{Key: "gpu", Op: domain.OpNE, Value: "x"}.Matches(nil))
	require.False(t, domain.Constraint{Key: "gpu", Op: domain.OpExists}.Matches(nil))
	require.False(t, domain.Constraint{Key: "gpu", Op: domain.OpGE, Value: "0"}.Matches(nil))
}

func TestConstraintString(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		c    domain.Constraint
		want string
	}{
		{"EXISTS renders key=EXISTS", domain.Constraint{Key: "gpu", Op: domain.OpExists}, "gpu=EXISTS"},
		{"NOT_EXISTS renders key=NOT_EXISTS", domain.Constraint{Key: "gpu", Op: domain.OpNotExists}, "gpu=NOT_EXISTS"},
		{"EQ renders key EQ value", domain.Constraint{Key: "zone", Op: domain.OpEQ, Value: "a"}, "zone EQ a"},
		{"GE renders key GE value", domain.Constraint{Key: "cores", Op: domain.OpGE, Value: "4"}, "cores GE 4"},
		{"IN renders the values list", domain.Constraint{Key: "tier", Op: domain.OpIn, Values: []string{"a", "b"}}, "tier IN [a b]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.c.String())
		})
	}
}

// ---------------------------------------------------------------------------
// Validation of the Step fields that feed placement

// plValidate normalizes a one-step spec after mut edits its step, and
// validates it under "spec".
func plValidate(mut func(*domain.Step)) []domain.FieldError {
	s := domain.Step{Name: "a", Command: "echo a"}
	mut(&s)
	w := domain.WorkflowSpec{Steps: []domain.Step{s}}
	w.Normalize()
	return w.Validate("spec")
}

func plIntp(n int) *int { return &n }

type plFieldWant struct {
	field string
	msg   string // substring of the message
}

func plRequireErrors(t *testing.T, errs []domain.FieldError, want []plFieldWant) {
	t.Helper()
	got := make([]string, len(errs))
	for i, e := range errs {
		got[i] = e.Field
	}
	exp := make([]string, len(want))
	for i, w := range want {
		exp[i] = w.field
	}
	require.ElementsMatch(t, exp, got, "errors: %v", errs)
	for _, w := range want {
		i := slices.IndexFunc(errs, func(e domain.FieldError) bool { return e.Field == w.field })
		require.Contains(t, errs[i].Message, w.msg, "message of %s", w.field)
	}
}

func TestPlacementValidateConstraints(t *testing.T) {
	t.Parallel()
	ok := domain.Constraint{Key: "gpu", Op: domain.OpExists}
	cases := []struct {
		name string
		cs   []domain.Constraint
		want []plFieldWant
	}{
		{"every op accepted with a well-formed operand", []domain.Constraint{
			{Key: "zone", Op: domain.OpEQ, Value: "a"},
			{Key: "zone", Op: domain.OpNE, Value: ""},
			{Key: "gpu", Op: domain.OpExists},
			{Key: "tpu", Op: domain.OpNotExists},
			{Key: "cores", Op: domain.OpGT, Value: "4"},
			{Key: "cores", Op: domain.OpGE, Value: "-1.5"},
			{Key: "cores", Op: domain.OpLT, Value: "1e3"},
			{Key: "cores", Op: domain.OpLE, Value: "0"},
			{Key: "tier", Op: domain.OpIn, Values: []string{"gold"}},
		}, nil},
		{"unknown op rejected at its index", []domain.Constraint{ok, {Key: "zone", Op: "LIKE", Value: "a"}},
			[]plFieldWant{{"spec.steps[0].constraints[1]", `unknown op "LIKE"`}}},
		{"lower-case op rejected", []domain.Constraint{{Key: "zone", Op: "eq", Value: "a"}},
			[]plFieldWant{{"spec.steps[0].constraints[0]", `unknown op "eq"`}}},
		{"empty op rejected", []domain.Constraint{{Key: "zone"}},
			[]plFieldWant{{"spec.steps[0].constraints[0]", `unknown op ""`}}},
		{"GT with non-number rejected", []domain.Constraint{ok, {Key: "cores", Op: domain.OpGT, Value: "four"}},
			[]plFieldWant{{"spec.steps[0].constraints[1]", `GT needs a numeric value, got "four"`}}},
		{"GE with empty value rejected", []domain.Constraint{ok, {Key: "cores", Op: domain.OpGE}},
			[]plFieldWant{{"spec.steps[0].constraints[1]", `GE needs a numeric value, got ""`}}},
		{"LT with non-number rejected", []domain.Constraint{{Key: "cores", Op: domain.OpLT, Value: "8 cores"}},
			[]plFieldWant{{"spec.steps[0].constraints[0]", `LT needs a numeric value`}}},
		{"LE with non-number rejected", []domain.Constraint{{Key: "cores", Op: domain.OpLE, Value: "x"}},
			[]plFieldWant{{"spec.steps[0].constraints[0]", `LE needs a numeric value`}}},
		{"IN without values rejected", []domain.Constraint{ok, {Key: "tier", Op: domain.OpIn, Value: "gold"}},
			[]plFieldWant{{"spec.steps[0].constraints[1]", "IN needs values"}}},
		{"empty key rejected", []domain.Constraint{ok, {Op: domain.OpExists}},
			[]plFieldWant{{"spec.steps[0].constraints[1]", "key is required"}}},
		{"empty key reported before a bad op", []domain.Constraint{{Op: "LIKE"}},
			[]plFieldWant{{"spec.steps[0].constraints[0]", "key is required"}}},
		{"each bad constraint reported at its own index", []domain.Constraint{
			{Key: "a", Op: "??"}, ok, {Key: "b", Op: domain.OpIn},
		}, []plFieldWant{
			{"spec.steps[0].constraints[0]", `unknown op "??"`},
			{"spec.steps[0].constraints[2]", "IN needs values"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := plValidate(func(s *domain.Step) { s.Constraints = tc.cs })
			plRequireErrors(t, errs, tc.want)
		})
	}
}

func TestPlacementValidateConstraintsOnLaterStep(t *testing.T) {
	t.Parallel()
	w := domain.WorkflowSpec{Steps: []domain.Step{
		{Name: "a", Command: "x"},
		{Name: "b", Command: "x", Constraints: []domain.Constraint{{Key: "cores", Op: domain.OpGT, Value: "many"}}},
	}}
	w.Normalize()
	errs := w.Validate("body.spec")
	require.Len(t, errs, 1, "%v", errs)
	require.Equal(t, "body.spec.steps[1].constraints[0]", errs[0].Field)
}

func TestPlacementValidateStepFields(t *testing.T) {
	t.Parallel()
	const (
		prio  = "spec.steps[0].priority"
		sched = "spec.steps[0].scheduling_timeout"
		tmo   = "spec.steps[0].timeout"
		res   = "spec.steps[0].resources"
		mrp   = "spec.steps[0].max_retries_preemption"
		mtf   = "spec.steps[0].max_task_failures"
	)
	cases := []struct {
		name string
		mut  func(*domain.Step)
		want []plFieldWant
	}{
		{"priority production accepted", func(s *domain.Step) { s.Priority = "production" }, nil},
		{"priority interactive accepted", func(s *domain.Step) { s.Priority = "interactive" }, nil},
		{"priority batch accepted", func(s *domain.Step) { s.Priority = "batch" }, nil},
		{"priority empty normalized to interactive", func(s *domain.Step) { s.Priority = "" }, nil},
		{"priority unknown band rejected", func(s *domain.Step) { s.Priority = "urgent" },
			[]plFieldWant{{prio, `must be production, interactive or batch; got "urgent"`}}},
		{"priority is case-sensitive", func(s *domain.Step) { s.Priority = "Batch" },
			[]plFieldWant{{prio, `got "Batch"`}}},

		{"scheduling_timeout empty accepted", func(s *domain.Step) { s.SchedulingTimeout = "" }, nil},
		{"scheduling_timeout 0s accepted", func(s *domain.Step) { s.SchedulingTimeout = "0s" }, nil},
		{"scheduling_timeout compound accepted", func(s *domain.Step) { s.SchedulingTimeout = "1h30m" }, nil},
		{"scheduling_timeout 30 days accepted", func(s *domain.Step) { s.SchedulingTimeout = "720h" }, nil},
		{"scheduling_timeout over 30 days rejected", func(s *domain.Step) { s.SchedulingTimeout = "720h1s" },
			[]plFieldWant{{sched, `got "720h1s"`}}},
		{"scheduling_timeout negative rejected", func(s *domain.Step) { s.SchedulingTimeout = "-1s" },
			[]plFieldWant{{sched, `got "-1s"`}}},
		{"scheduling_timeout word rejected", func(s *domain.Step) { s.SchedulingTimeout = "soon" },
			[]plFieldWant{{sched, `must be a duration such as "30s" or "5m"`}}},
		{"scheduling_timeout without unit rejected", func(s *domain.Step) { s.SchedulingTimeout = "30" },
			[]plFieldWant{{sched, `got "30"`}}},

		{"timeout 5m accepted", func(s *domain.Step) { s.Timeout = "5m" }, nil},
		{"timeout 30 days accepted", func(s *domain.Step) { s.Timeout = "720h" }, nil},
		{"timeout over 30 days rejected", func(s *domain.Step) { s.Timeout = "721h" },
			[]plFieldWant{{tmo, "from 0 to 720h0m0s"}}},
		{"timeout negative rejected", func(s *domain.Step) { s.Timeout = "-5m" },
			[]plFieldWant{{tmo, `got "-5m"`}}},
		{"timeout garbage rejected", func(s *domain.Step) { s.Timeout = "5 minutes" },
			[]plFieldWant{{tmo, `got "5 minutes"`}}},
		{"both durations bad both reported", func(s *domain.Step) { s.Timeout = "x"; s.SchedulingTimeout = "y" },
			[]plFieldWant{{tmo, `got "x"`}, {sched, `got "y"`}}},

		{"resources nil accepted", func(s *domain.Step) { s.Resources = nil }, nil},
		{"resources zero accepted", func(s *domain.Step) { s.Resources = &domain.Resources{} }, nil},
		{"resources positive accepted", func(s *domain.Step) {
			s.Resources = &domain.Resources{CPUMillis: 500, MemoryBytes: plGiB}
		}, nil},
		{"resources negative cpu rejected", func(s *domain.Step) { s.Resources = &domain.Resources{CPUMillis: -1} },
			[]plFieldWant{{res, "must not be negative"}}},
		{"resources negative memory rejected", func(s *domain.Step) {
			s.Resources = &domain.Resources{CPUMillis: 100, MemoryBytes: -1}
		}, []plFieldWant{{res, "must not be negative"}}},

		{"max_retries_preemption 0 accepted", func(s *domain.Step) { s.MaxRetriesPreemption = plIntp(0) }, nil},
		{"max_retries_preemption 10000 accepted", func(s *domain.Step) { s.MaxRetriesPreemption = plIntp(10000) }, nil},
		{"max_retries_preemption negative rejected", func(s *domain.Step) { s.MaxRetriesPreemption = plIntp(-1) },
			[]plFieldWant{{mrp, "must be between 0 and 10000, got -1"}}},
		{"max_retries_preemption over 10000 rejected", func(s *domain.Step) { s.MaxRetriesPreemption = plIntp(10001) },
			[]plFieldWant{{mrp, "got 10001"}}},

		{"max_task_failures 0 accepted", func(s *domain.Step) { s.MaxTaskFailures = plIntp(0) }, nil},
		{"max_task_failures MaxReplicas accepted", func(s *domain.Step) { s.MaxTaskFailures = plIntp(domain.MaxReplicas) }, nil},
		{"max_task_failures negative rejected", func(s *domain.Step) { s.MaxTaskFailures = plIntp(-1) },
			[]plFieldWant{{mtf, "must be between 0 and 1000, got -1"}}},
		{"max_task_failures over MaxReplicas rejected", func(s *domain.Step) { s.MaxTaskFailures = plIntp(domain.MaxReplicas + 1) },
			[]plFieldWant{{mtf, "got 1001"}}},

		{"coscheduled accepted", func(s *domain.Step) { s.Coscheduled = true; s.Replicas = plIntp(4) }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plRequireErrors(t, plValidate(tc.mut), tc.want)
		})
	}
}

func TestPlacementStepRequestAndDefaults(t *testing.T) {
	t.Parallel()
	cs := []domain.Constraint{{Key: "gpu", Op: domain.OpExists}}
	s := domain.Step{Priority: "batch", Resources: &domain.Resources{CPUMillis: 250, MemoryBytes: plGiB}, Constraints: cs}
	require.Equal(t, domain.TaskRequest{
		Resources:   domain.Resources{CPUMillis: 250, MemoryBytes: plGiB},
		Constraints: cs,
		Priority:    plBatch,
	}, s.Request())
	require.Equal(t, domain.TaskRequest{Priority: plInteractive}, domain.Step{}.Request(), "no resources, default band")

	require.Equal(t, domain.DefaultMaxRetriesPreemption, domain.Step{}.RetriesPreemption())
	require.Equal(t, 3, domain.Step{MaxRetriesPreemption: plIntp(3)}.RetriesPreemption())
	require.Equal(t, 0, domain.Step{}.TaskFailuresAllowed())
	require.Equal(t, 2, domain.Step{MaxTaskFailures: plIntp(2)}.TaskFailuresAllowed())
	require.Zero(t, domain.Step{SchedulingTimeout: "-1s"}.SchedulingTimeoutDuration())
	require.Zero(t, domain.Step{Timeout: "nope"}.TimeoutDuration())
	require.Equal(t, int64(90e9), int64(domain.Step{SchedulingTimeout: "90s"}.SchedulingTimeoutDuration()))
}

// ---------------------------------------------------------------------------
// Priority bands

func TestParsePriorityBands(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want domain.Priority
	}{
		{"production parses", "production", plProduction},
		{"interactive parses", "interactive", plInteractive},
		{"batch parses", "batch", plBatch},
		{"empty defaults to interactive", "", plInteractive},
		{"unknown defaults to interactive", "urgent", plInteractive},
		{"names are case-sensitive", "Production", plInteractive},
		{"names are not trimmed", " batch", plInteractive},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, domain.ParsePriority(tc.in))
		})
	}
}

func TestPriorityBandString(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		p    domain.Priority
		want string
	}{
		{"batch names itself", plBatch, "batch"},
		{"interactive names itself", plInteractive, "interactive"},
		{"production names itself", plProduction, "production"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.p.String())
			require.Equal(t, tc.p, domain.ParsePriority(tc.p.String()), "round trip")
		})
	}
	require.Less(t, plBatch, plInteractive, "bands are ordered")
	require.Less(t, plInteractive, plProduction, "bands are ordered")
}

func TestPriorityCanPreemptMatrix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		by, victim domain.Priority
		want       bool
	}{
		{"production preempts interactive", plProduction, plInteractive, true},
		{"production preempts batch", plProduction, plBatch, true},
		{"production never preempts production", plProduction, plProduction, false},
		{"interactive preempts batch", plInteractive, plBatch, true},
		{"interactive cannot preempt its own band", plInteractive, plInteractive, false},
		{"interactive cannot preempt production", plInteractive, plProduction, false},
		{"batch cannot preempt batch", plBatch, plBatch, false},
		{"batch cannot preempt interactive", plBatch, plInteractive, false},
		{"batch cannot preempt production", plBatch, plProduction, false},
		{"no band above production preempts it", domain.Priority(3), plProduction, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.by.CanPreempt(tc.victim))
		})
	}
}

// ---------------------------------------------------------------------------
// Place

func TestPlace(t *testing.T) {
	t.Parallel()
	gpu := []domain.Constraint{{Key: "gpu", Op: domain.OpExists}}
	cases := []struct {
		name string
		r    domain.TaskRequest
		ws   []domain.WorkerView
		want int
	}{
		{"picks the worker with most free slots",
			domain.TaskRequest{}, []domain.WorkerView{plWorker("a", 1), plWorker("b", 3), plWorker("c", 2)}, 1},
		{"ties go to the first index",
			domain.TaskRequest{}, []domain.WorkerView{plWorker("a", 1), plWorker("b", 2), plWorker("c", 2)}, 1},
		{"respects constraints over free slots",
			domain.TaskRequest{Constraints: gpu}, []domain.WorkerView{plWorker("a", 5), plWorker("b", 1, "gpu", "a100"), plWorker("c", 4)}, 1},
		{"every constraint must hold",
			domain.TaskRequest{Constraints: []domain.Constraint{
				{Key: "gpu", Op: domain.OpExists}, {Key: "zone", Op: domain.OpEQ, Value: "eu"},
			}}, []domain.WorkerView{plWorker("a", 5, "gpu", "x", "zone", "us"), plWorker("b", 1, "gpu", "x", "zone", "eu"), plWorker("c", 4, "zone", "eu")}, 1},
		{"skips a worker without a free slot",
			domain.TaskRequest{}, []domain.WorkerView{plWorker("a", 0), plWorker("b", 1)}, 1},
		{"skips a worker with negative free slots",
			domain.TaskRequest{}, []domain.WorkerView{plWorker("a", -2), plWorker("b", 1)}, 1},
		{"skips a worker short of memory despite more slots",
			domain.TaskRequest{Resources: domain.Resources{MemoryBytes: 2 * plGiB}},
			[]domain.WorkerView{plWithCap(plWorker("a", 5), 0, 4*plGiB, 0, 3*plGiB), plWithCap(plWorker("b", 1), 0, 16*plGiB, 0, 0)}, 1},
		{"skips a worker short of cpu despite more slots",
			domain.TaskRequest{Resources: domain.Resources{CPUMillis: 1000}},
			[]domain.WorkerView{plWithCap(plWorker("a", 5), 4000, 0, 3500, 0), plWithCap(plWorker("b", 1), 2000, 0, 0, 0)}, 1},
		{"exact fit of cpu and memory is accepted",
			domain.TaskRequest{Resources: domain.Resources{CPUMillis: 500, MemoryBytes: plGiB}},
			[]domain.WorkerView{plWithCap(plWorker("a", 1), 1000, 2*plGiB, 500, plGiB)}, 0},
		{"one milli over free cpu is refused",
			domain.TaskRequest{Resources: domain.Resources{CPUMillis: 501}},
			[]domain.WorkerView{plWithCap(plWorker("a", 3), 1000, 0, 500, 0), plWorker("b", 1)}, 1},
		{"undeclared capacity is unlimited",
			domain.TaskRequest{Resources: domain.Resources{CPUMillis: 64000, MemoryBytes: 1 << 40}},
			[]domain.WorkerView{plWithCap(plWorker("a", 2), 1000, 2*plGiB, 0, 0), plWorker("b", 1)}, 1},
		{"undeclared memory is unlimited while declared cpu still limits",
			domain.TaskRequest{Resources: domain.Resources{CPUMillis: 500, MemoryBytes: 1 << 40}},
			[]domain.WorkerView{plWithCap(plWorker("a", 2), 1000, 0, 0, 0)}, 0},
		{"zero request fits a fully used worker with a slot",
			domain.TaskRequest{}, []domain.WorkerView{plWithCap(plWorker("a", 1), 1000, plGiB, 1000, plGiB)}, 0},
		{"priority does not affect placement",
			domain.TaskRequest{Priority: plProduction}, []domain.WorkerView{plWorker("a", 1), plWorker("b", 2)}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := plCloneWorkers(tc.ws)
			got, reason := domain.Place(tc.r, tc.ws)
			require.Equal(t, tc.want, got, "reason %q", reason)
			require.Empty(t, reason)
			require.Equal(t, before, tc.ws, "Place must not change ws")
		})
	}
}

func TestPlacePendingReasons(t *testing.T) {
	t.Parallel()
	mem := func(n int64) domain.TaskRequest {
		return domain.TaskRequest{Resources: domain.Resources{MemoryBytes: n}}
	}
	cpu := func(n int64) domain.TaskRequest { return domain.TaskRequest{Resources: domain.Resources{CPUMillis: n}} }
	cases := []struct {
		name string
		r    domain.TaskRequest
		ws   []domain.WorkerView
		want string
	}{
		{"no workers", domain.TaskRequest{}, nil, "no worker is registered and alive"},
		{"no workers even with constraints",
			domain.TaskRequest{Constraints: []domain.Constraint{{Key: "gpu", Op: domain.OpExists}}}, []domain.WorkerView{},
			"no worker is registered and alive"},
		{"no worker matches EXISTS constraint",
			domain.TaskRequest{Constraints: []domain.Constraint{{Key: "gpu", Op: domain.OpExists}}},
			[]domain.WorkerView{plWorker("a", 4, "zone", "eu")},
			"no worker matches constraint gpu=EXISTS"},
		{"no worker matches EQ constraint",
			domain.TaskRequest{Constraints: []domain.Constraint{{Key: "zone", Op: domain.OpEQ, Value: "eu"}}},
			[]domain.WorkerView{plWorker("a", 4, "zone", "us"), plWorker("b", 4)},
			"no worker matches constraint zone EQ eu"},
		{"no worker matches IN constraint",
			domain.TaskRequest{Constraints: []domain.Constraint{{Key: "tier", Op: domain.OpIn, Values: []string{"gold", "silver"}}}},
			[]domain.WorkerView{plWorker("a", 4, "tier", "bronze")},
			"no worker matches constraint tier IN [gold silver]"},
		{"reason names the constraint that failed, not the first",
			domain.TaskRequest{Constraints: []domain.Constraint{{Key: "zone", Op: domain.OpEQ, Value: "eu"}, {Key: "gpu", Op: domain.OpExists}}},
			[]domain.WorkerView{plWorker("a", 4, "zone", "eu")},
			"no worker matches constraint gpu=EXISTS"},
		{"insufficient memory with sizes",
			mem(8 * plGiB),
			[]domain.WorkerView{plWithCap(plWorker("a", 2), 0, 16*plGiB, 0, 14*plGiB), plWithCap(plWorker("b", 2), 0, 4*plGiB, 0, 3*plGiB)},
			"insufficient memory: need 8.0 GiB, largest free 2.0 GiB"},
		{"insufficient memory in MiB",
			mem(512 * plMiB),
			[]domain.WorkerView{plWithCap(plWorker("a", 1), 0, plGiB, 0, 768*plMiB)},
			"insufficient memory: need 512.0 MiB, largest free 256.0 MiB"},
		{"insufficient memory in fractional GiB",
			mem(3*plGiB + plGiB/2),
			[]domain.WorkerView{plWithCap(plWorker("a", 1), 0, 2*plGiB, 0, plGiB/2)},
			"insufficient memory: need 3.5 GiB, largest free 1.5 GiB"},
		{"insufficient memory on an overcommitted worker shows zero free",
			mem(plGiB),
			[]domain.WorkerView{plWithCap(plWorker("a", 1), 0, plGiB, 0, 2*plGiB)},
			"insufficient memory: need 1.0 GiB, largest free 0 B"},
		{"insufficient memory ignores non-matching workers",
			domain.TaskRequest{Resources: domain.Resources{MemoryBytes: 8 * plGiB}, Constraints: []domain.Constraint{{Key: "gpu", Op: domain.OpExists}}},
			[]domain.WorkerView{plWithCap(plWorker("a", 2, "gpu", "x"), 0, 4*plGiB, 0, 0), plWithCap(plWorker("b", 2), 0, 64*plGiB, 0, 0)},
			"insufficient memory: need 8.0 GiB, largest free 4.0 GiB"},
		{"insufficient cpu",
			cpu(2000),
			[]domain.WorkerView{plWithCap(plWorker("a", 1), 1000, 0, 500, 0), plWithCap(plWorker("b", 1), 4000, 0, 3900, 0)},
			"insufficient cpu: need 2000m, largest free 500m"},
		{"memory shortfall is reported before cpu",
			domain.TaskRequest{Resources: domain.Resources{CPUMillis: 2000, MemoryBytes: 2 * plGiB}},
			[]domain.WorkerView{plWithCap(plWorker("a", 1), 1000, plGiB, 0, 0)},
			"insufficient memory: need 2.0 GiB, largest free 1.0 GiB"},
		{"no free slot",
			domain.TaskRequest{},
			[]domain.WorkerView{plWorker("a", 0), plWorker("b", 0)},
			"no free slot on the 2 matching worker(s)"},
		{"no free slot counts only matching workers",
			domain.TaskRequest{Constraints: []domain.Constraint{{Key: "gpu", Op: domain.OpExists}}},
			[]domain.WorkerView{plWorker("a", 0, "gpu", "x"), plWorker("b", 8)},
			"no free slot on the 1 matching worker(s)"},
		{"no free slot wins over resource shortfall",
			mem(8 * plGiB),
			[]domain.WorkerView{plWithCap(plWorker("a", 0), 0, plGiB, 0, 0)},
			"no free slot on the 1 matching worker(s)"},
		{"cpu and memory free only on different workers",
			domain.TaskRequest{Resources: domain.Resources{CPUMillis: 2000, MemoryBytes: 4 * plGiB}},
			[]domain.WorkerView{plWithCap(plWorker("a", 1), 8000, plGiB, 0, 0), plWithCap(plWorker("b", 1), 1000, 16*plGiB, 0, 0)},
			"no matching worker has both the cpu and the memory free"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, reason := domain.Place(tc.r, tc.ws)
			require.Equal(t, -1, got)
			require.Equal(t, tc.want, reason)
		})
	}
}

// The pending_reason must explain why the task waits. Here the only worker
// with a free slot has 2 GiB free; the worker with 16 GiB free has no slot.
// The true reason is the memory shortfall on the worker that could take the
// task; the slot-less worker's memory must not mask it.
func TestPlacePendingReasonIgnoresMemoryOfSlotlessWorkers(t *testing.T) {
	t.Parallel()
	r := domain.TaskRequest{Resources: domain.Resources{MemoryBytes: 8 * plGiB}}
	ws := []domain.WorkerView{
		plWithCap(plWorker("a", 1), 0, 4*plGiB, 0, 2*plGiB),
		plWithCap(plWorker("b", 0), 0, 16*plGiB, 0, 0),
	}
	got, reason := domain.Place(r, ws)
	require.Equal(t, -1, got)
	require.Equal(t, "insufficient memory: need 8.0 GiB, largest free 2.0 GiB", reason)
}

func TestTake(t *testing.T) {
	t.Parallel()
	ws := []domain.WorkerView{plWorker("a", 2), plWithCap(plWorker("b", 3), 4000, 8*plGiB, 1000, plGiB)}
	domain.Take(ws, 1, domain.Resources{CPUMillis: 500, MemoryBytes: 2 * plGiB})
	require.Equal(t, 2, ws[0].FreeSlots, "other workers untouched")
	require.Equal(t, domain.Resources{}, ws[0].Used)
	require.Equal(t, 2, ws[1].FreeSlots)
	require.Equal(t, domain.Resources{CPUMillis: 1500, MemoryBytes: 3 * plGiB}, ws[1].Used)
	require.Equal(t, domain.Resources{CPUMillis: 2500, MemoryBytes: 5 * plGiB}, ws[1].Free())
}

// ---------------------------------------------------------------------------
// PlaceGang

func TestPlaceGang(t *testing.T) {
	t.Parallel()
	task := func(memGiB int64, cs ...domain.Constraint) domain.TaskRequest {
		return domain.TaskRequest{Resources: domain.Resources{MemoryBytes: memGiB * plGiB}, Constraints: cs}
	}
	big := func(id string, kv ...string) domain.WorkerView {
		return plWithCap(plWorker(id, 4, kv...), 0, 8*plGiB, 0, 0)
	}
	cases := []struct {
		name      string
		rs        []domain.TaskRequest
		ws        []domain.WorkerView
		want      []int
		wantAfter []domain.WorkerView // nil: ws unchanged
		reason    string
	}{
		{"success spreads by free slots and accounts resources across the gang",
			[]domain.TaskRequest{task(3), task(3), task(3), task(3)},
			[]domain.WorkerView{big("a"), big("b")},
			[]int{0, 1, 0, 1},
			[]domain.WorkerView{
				plWithCap(plWorker("a", 2), 0, 8*plGiB, 0, 6*plGiB),
				plWithCap(plWorker("b", 2), 0, 8*plGiB, 0, 6*plGiB),
			}, ""},
		{"success moves on when the gang fills a worker's memory",
			[]domain.TaskRequest{task(6), task(6)},
			[]domain.WorkerView{plWithCap(plWorker("a", 4), 0, 8*plGiB, 0, 0), plWithCap(plWorker("b", 1), 0, 8*plGiB, 0, 0)},
			[]int{0, 1},
			[]domain.WorkerView{plWithCap(plWorker("a", 3), 0, 8*plGiB, 0, 6*plGiB), plWithCap(plWorker("b", 0), 0, 8*plGiB, 0, 6*plGiB)},
			""},
		{"success honours each task's constraints",
			[]domain.TaskRequest{task(1, domain.Constraint{Key: "gpu", Op: domain.OpExists}), task(1, domain.Constraint{Key: "gpu", Op: domain.OpNotExists})},
			[]domain.WorkerView{big("cpu"), big("gpu", "gpu", "a100")},
			[]int{1, 0},
			[]domain.WorkerView{
				plWithCap(plWorker("cpu", 3), 0, 8*plGiB, 0, plGiB),
				plWithCap(plWorker("gpu", 3, "gpu", "a100"), 0, 8*plGiB, 0, plGiB),
			}, ""},
		{"failure on memory leaves ws unchanged",
			[]domain.TaskRequest{task(3), task(3), task(3)},
			[]domain.WorkerView{big("a")},
			nil, nil, "coscheduled: 2 of 3 tasks fit; insufficient memory: need 3.0 GiB, largest free 2.0 GiB"},
		{"failure on slots leaves ws unchanged",
			[]domain.TaskRequest{{}, {}, {}},
			[]domain.WorkerView{plWorker("a", 1), plWorker("b", 1)},
			nil, nil, "coscheduled: 2 of 3 tasks fit; no free slot on the 2 matching worker(s)"},
		{"failure on a constraint of the first task",
			[]domain.TaskRequest{task(0, domain.Constraint{Key: "gpu", Op: domain.OpExists}), task(0)},
			[]domain.WorkerView{big("a")},
			nil, nil, "coscheduled: 0 of 2 tasks fit; no worker matches constraint gpu=EXISTS"},
		{"failure with no workers",
			[]domain.TaskRequest{task(0)}, nil,
			nil, nil, "coscheduled: 0 of 1 tasks fit; no worker is registered and alive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := plCloneWorkers(tc.ws)
			got, reason := domain.PlaceGang(tc.rs, tc.ws)
			require.Equal(t, tc.reason, reason)
			require.Equal(t, tc.want, got)
			if tc.wantAfter == nil {
				require.Equal(t, before, tc.ws, "ws must be unchanged when the gang does not fit")
			} else {
				require.Equal(t, tc.wantAfter, tc.ws)
			}
		})
	}
}

func TestPlaceGangEmpty(t *testing.T) {
	t.Parallel()
	ws := []domain.WorkerView{plWorker("a", 1)}
	got, reason := domain.PlaceGang(nil, ws)
	require.Empty(t, reason)
	require.NotNil(t, got, "an empty gang is placed, not refused")
	require.Empty(t, got)
	require.Equal(t, 1, ws[0].FreeSlots)
}

// ---------------------------------------------------------------------------
// PickVictims

func TestPickVictims(t *testing.T) {
	t.Parallel()
	// full is a worker with 8 GiB, all used, and no free slot.
	full := func(id string, kv ...string) domain.WorkerView {
		return plWithCap(plWorker(id, 0, kv...), 0, 8*plGiB, 0, 8*plGiB)
	}
	run := func(id int64, worker int, p domain.Priority, memGiB int64, started bool, order int64) domain.Running {
		return domain.Running{AttemptID: id, Worker: worker, Priority: p, Resources: domain.Resources{MemoryBytes: memGiB * plGiB}, Started: started, Order: order}
	}
	req := func(p domain.Priority, memGiB int64, cs ...domain.Constraint) domain.TaskRequest {
		return domain.TaskRequest{Priority: p, Resources: domain.Resources{MemoryBytes: memGiB * plGiB}, Constraints: cs}
	}
	cases := []struct {
		name       string
		r          domain.TaskRequest
		ws         []domain.WorkerView
		running    []domain.Running
		wantWorker int
		wantIDs    []int64
	}{
		{"only lower bands are victims",
			req(plInteractive, 4), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plInteractive, 4, false, 9), run(2, 0, plBatch, 4, true, 1)},
			0, []int64{2}},
		{"same band is never a victim",
			req(plInteractive, 4), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plInteractive, 8, false, 1)},
			-1, nil},
		{"batch preempts nothing",
			req(plBatch, 4), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plBatch, 8, false, 1)},
			-1, nil},
		{"production preempts interactive",
			req(plProduction, 4), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plInteractive, 8, true, 1)},
			0, []int64{1}},
		{"production is never preempted",
			req(plProduction, 4), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plProduction, 8, false, 1)},
			-1, nil},
		{"not-started victim preferred over a more recent lower-band started one",
			req(plProduction, 4), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plBatch, 4, true, 9), run(2, 0, plInteractive, 4, false, 1)},
			0, []int64{2}},
		{"then the lowest band",
			req(plProduction, 4), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plInteractive, 4, true, 9), run(2, 0, plBatch, 4, true, 1)},
			0, []int64{2}},
		{"then the most recent",
			req(plInteractive, 4), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plBatch, 4, true, 3), run(2, 0, plBatch, 4, true, 7), run(3, 0, plBatch, 0, true, 5)},
			0, []int64{2}},
		{"victims listed in eviction order until the request fits",
			req(plInteractive, 6), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plBatch, 3, true, 1), run(2, 0, plBatch, 3, true, 2), run(3, 0, plBatch, 2, false, 0)},
			0, []int64{3, 2, 1}},
		{"eviction frees a slot when only the slot is missing",
			domain.TaskRequest{Priority: plInteractive}, []domain.WorkerView{plWorker("a", 0)},
			[]domain.Running{run(1, 0, plBatch, 0, true, 1), run(2, 0, plBatch, 0, true, 2)},
			0, []int64{2}},
		{"eviction frees cpu",
			domain.TaskRequest{Priority: plProduction, Resources: domain.Resources{CPUMillis: 1500}},
			[]domain.WorkerView{plWithCap(plWorker("a", 1), 2000, 0, 2000, 0)},
			[]domain.Running{
				{AttemptID: 1, Worker: 0, Priority: plBatch, Resources: domain.Resources{CPUMillis: 1000}, Started: true, Order: 5},
				{AttemptID: 2, Worker: 0, Priority: plBatch, Resources: domain.Resources{CPUMillis: 1000}, Started: true, Order: 4},
			},
			0, []int64{1, 2}},
		{"fewest victims across workers",
			req(plInteractive, 4), []domain.WorkerView{full("a"), full("b")},
			[]domain.Running{run(1, 0, plBatch, 2, false, 1), run(2, 0, plBatch, 2, false, 2), run(3, 1, plBatch, 4, true, 1)},
			1, []int64{3}},
		{"fewest victims beats free victims across workers",
			req(plInteractive, 4), []domain.WorkerView{full("a"), full("b")},
			[]domain.Running{run(1, 0, plBatch, 2, false, 1), run(2, 0, plBatch, 2, false, 2), run(3, 1, plBatch, 4, true, 1), run(4, 1, plBatch, 4, true, 2)},
			1, []int64{4}},
		{"none when eviction cannot make room",
			req(plInteractive, 4), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plProduction, 6, true, 1), run(2, 0, plBatch, 2, false, 2)},
			-1, nil},
		{"none when the request exceeds the worker's capacity",
			req(plProduction, 16), []domain.WorkerView{full("a")},
			[]domain.Running{run(1, 0, plBatch, 8, false, 1)},
			-1, nil},
		{"none when constraints fail on the worker with victims",
			req(plProduction, 4, domain.Constraint{Key: "gpu", Op: domain.OpExists}), []domain.WorkerView{full("a"), full("b", "gpu", "x")},
			[]domain.Running{run(1, 0, plBatch, 8, false, 1), run(2, 1, plProduction, 8, true, 1)},
			-1, nil},
		{"victims only on the worker that matches constraints",
			req(plProduction, 4, domain.Constraint{Key: "gpu", Op: domain.OpExists}), []domain.WorkerView{full("a"), full("b", "gpu", "x")},
			[]domain.Running{run(1, 0, plBatch, 8, false, 1), run(2, 1, plBatch, 8, true, 1)},
			1, []int64{2}},
		{"none when it already fits",
			req(plProduction, 4), []domain.WorkerView{plWithCap(plWorker("a", 1), 0, 8*plGiB, 0, 0)},
			[]domain.Running{run(1, 0, plBatch, 0, false, 1)},
			-1, nil},
		{"none with no workers",
			req(plProduction, 4), nil,
			[]domain.Running{run(1, 0, plBatch, 8, false, 1)},
			-1, nil},
		{"none with nothing running",
			req(plProduction, 4), []domain.WorkerView{full("a")},
			nil, -1, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			beforeWs := plCloneWorkers(tc.ws)
			beforeRun := slices.Clone(tc.running)
			w, victims := domain.PickVictims(tc.r, tc.ws, tc.running)
			require.Equal(t, tc.wantWorker, w)
			if tc.wantIDs == nil {
				require.Empty(t, victims)
			} else {
				require.Equal(t, tc.wantIDs, plIDs(victims))
			}
			require.Equal(t, beforeWs, tc.ws, "PickVictims must not change ws")
			require.Equal(t, beforeRun, tc.running, "PickVictims must not change running")
		})
	}
}

// PickVictims's contract: "the fewest victims, preferring not-yet-started
// ones (free), then the lowest band, then the most recent". When two
// workers need the same number of victims, the preferences must decide
// between them, not the worker index.
func TestPickVictimsTieBreaksAcrossWorkers(t *testing.T) {
	t.Parallel()
	full := func(id string) domain.WorkerView {
		return plWithCap(plWorker(id, 0), 0, 8*plGiB, 0, 8*plGiB)
	}
	r := domain.TaskRequest{Priority: plProduction, Resources: domain.Resources{MemoryBytes: 4 * plGiB}}
	cases := []struct {
		name    string
		running []domain.Running
		want    int
	}{
		{"not-started victim on a later worker beats a started one on an earlier worker", []domain.Running{
			{AttemptID: 1, Worker: 0, Priority: plBatch, Resources: domain.Resources{MemoryBytes: 8 * plGiB}, Started: true, Order: 1},
			{AttemptID: 2, Worker: 1, Priority: plBatch, Resources: domain.Resources{MemoryBytes: 8 * plGiB}, Started: false, Order: 1},
		}, 1},
		{"lower-band victim on a later worker beats a higher-band one on an earlier worker", []domain.Running{
			{AttemptID: 1, Worker: 0, Priority: plInteractive, Resources: domain.Resources{MemoryBytes: 8 * plGiB}, Started: true, Order: 1},
			{AttemptID: 2, Worker: 1, Priority: plBatch, Resources: domain.Resources{MemoryBytes: 8 * plGiB}, Started: true, Order: 1},
		}, 1},
		{"more recent victim on a later worker beats an older one on an earlier worker", []domain.Running{
			{AttemptID: 1, Worker: 0, Priority: plBatch, Resources: domain.Resources{MemoryBytes: 8 * plGiB}, Started: true, Order: 1},
			{AttemptID: 2, Worker: 1, Priority: plBatch, Resources: domain.Resources{MemoryBytes: 8 * plGiB}, Started: true, Order: 9},
		}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, victims := domain.PickVictims(r, []domain.WorkerView{full("a"), full("b")}, tc.running)
			require.Equal(t, tc.want, w, "victims %v", plIDs(victims))
			require.Equal(t, []int64{2}, plIDs(victims))
		})
	}
}

// "Most recent first" must hold for any int64 Order: the comparator must
// not overflow on Order differences beyond the int64 range.
func TestPickVictimsMostRecentWithExtremeOrders(t *testing.T) {
	t.Parallel()
	ws := []domain.WorkerView{plWorker("a", 0)}
	r := domain.TaskRequest{Priority: plInteractive}
	running := []domain.Running{
		{AttemptID: 1, Worker: 0, Priority: plBatch, Started: true, Order: 1},
		{AttemptID: 2, Worker: 0, Priority: plBatch, Started: true, Order: math.MinInt64},
	}
	w, victims := domain.PickVictims(r, ws, running)
	require.Equal(t, 0, w)
	require.Equal(t, []int64{1}, plIDs(victims), "Order 1 is more recent than Order MinInt64")
}

// ---------------------------------------------------------------------------
// Fuzzing

// plInput hands out fuzz bytes, zero once exhausted.
type plInput struct {
	b []byte
	i int
}

func (in *plInput) next() byte {
	if in.i >= len(in.b) {
		return 0
	}
	in.i++
	return in.b[in.i-1]
}

func (in *plInput) pick(n int) int { return int(in.next()) % n }

var (
	plKeys = []string{"gpu", "zone", "cores", "tier"}
	plVals = []string{"", "a", "b", "1", "2.5", "10", "x", "-3"}
	plOps  = []string{
		domain.OpEQ, domain.OpNE, domain.OpExists, domain.OpNotExists,
		domain.OpGT, domain.OpGE, domain.OpLT, domain.OpLE, domain.OpIn, "BOGUS",
	}
)

func (in *plInput) workers(n int) []domain.WorkerView {
	ws := make([]domain.WorkerView, n)
	for i := range ws {
		w := domain.WorkerView{ID: strings.Repeat("w", i+1), Labels: map[string]string{}}
		for _, k := range plKeys {
			if in.next()%2 == 1 {
				w.Labels[k] = plVals[in.pick(len(plVals))]
			}
		}
		if in.next()%4 != 0 {
			w.Capacity.CPUMillis = int64(in.pick(16)) * 250
		}
		if in.next()%4 != 0 {
			w.Capacity.MemoryBytes = int64(in.pick(16)) * 512 * plMiB
		}
		w.Used.CPUMillis = int64(in.pick(16)) * 250
		w.Used.MemoryBytes = int64(in.pick(16)) * 512 * plMiB
		w.FreeSlots = in.pick(5) - 1
		ws[i] = w
	}
	return ws
}

func (in *plInput) request() domain.TaskRequest {
	r := domain.TaskRequest{
		Resources: domain.Resources{CPUMillis: int64(in.pick(16)) * 250, MemoryBytes: int64(in.pick(16)) * 512 * plMiB},
		Priority:  domain.Priority(in.pick(3)),
	}
	for range in.pick(3) {
		c := domain.Constraint{Key: plKeys[in.pick(len(plKeys))], Op: plOps[in.pick(len(plOps))], Value: plVals[in.pick(len(plVals))]}
		for range in.pick(3) {
			c.Values = append(c.Values, plVals[in.pick(len(plVals))])
		}
		r.Constraints = append(r.Constraints, c)
	}
	return r
}

func FuzzPlace(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 1, 0, 1, 1, 0, 0, 1, 4, 1, 8, 2, 4, 3, 1, 0, 0, 0, 0, 1, 1, 15, 1, 15, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 1, 3, 4, 0, 2, 2, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 1, 2, 1, 2, 8, 8, 4, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 8, 8, 4, 12, 12, 1, 0, 2, 6, 0})
	f.Add([]byte{5, 255, 7, 255, 7, 255, 7, 255, 7, 3, 15, 3, 15, 0, 0, 3, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255})
	f.Add([]byte("any bytes at all make a cluster and a request"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &plInput{b: data}
		ws := in.workers(in.pick(6))
		r := in.request()
		before := plCloneWorkers(ws)

		got, reason := domain.Place(r, ws)
		require.Equal(t, before, ws, "Place must not change ws")

		// The oracle: workers that satisfy every constraint and fit.
		best, anyMatch := -1, false
		for i, w := range ws {
			if !plMatchesAll(r.Constraints, w.Labels) {
				continue
			}
			anyMatch = true
			if plFits(w, r.Resources) && (best < 0 || w.FreeSlots > ws[best].FreeSlots) {
				best = i
			}
		}
		if got >= 0 {
			require.Less(t, got, len(ws))
			require.Empty(t, reason)
			w := ws[got]
			for _, c := range r.Constraints {
				require.True(t, c.Matches(w.Labels), "chosen worker %d fails %s", got, c)
			}
			require.True(t, plFits(w, r.Resources), "chosen worker %d does not fit %+v: %+v", got, r.Resources, w)
			require.Equal(t, best, got, "the most free slots, first on ties")
			return
		}
		require.Equal(t, -1, got)
		require.NotEmpty(t, reason)
		require.Equal(t, -1, best, "Place refused (%q) but worker %d fits", reason, best)
		switch {
		case len(ws) == 0:
			require.Equal(t, "no worker is registered and alive", reason)
		case !anyMatch:
			require.True(t, strings.HasPrefix(reason, "no worker matches constraint "), reason)
		default:
			require.False(t, strings.HasPrefix(reason, "no worker matches constraint "), reason)
		}
	})
}

func FuzzPickVictims(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 1, 16, 1, 16, 16, 16, 1, 0, 0, 2, 0, 3, 0, 0, 4, 0, 1, 0, 8, 0, 0, 1, 7, 0, 0})
	f.Add([]byte{2, 1, 1, 0, 0, 1, 8, 1, 8, 8, 8, 0, 0, 0, 0, 0, 1, 8, 1, 8, 8, 8, 0, 6, 0, 0, 0, 2, 0, 4, 0, 1, 3, 1, 4, 1, 1, 4, 0, 2, 4, 2, 0, 4, 1, 0})
	f.Add([]byte{3, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 12, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2})
	f.Add([]byte("preempt the batch tasks to make room for production"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &plInput{b: data}
		ws := in.workers(in.pick(4))
		var running []domain.Running
		if len(ws) > 0 {
			for i := range in.pick(10) {
				x := domain.Running{
					AttemptID: int64(i + 1),
					Worker:    in.pick(len(ws)),
					Priority:  domain.Priority(in.pick(3)),
					Resources: domain.Resources{CPUMillis: int64(in.pick(8)) * 250, MemoryBytes: int64(in.pick(8)) * 512 * plMiB},
					Started:   in.next()%2 == 1,
					Order:     int64(int8(in.next())),
				}
				// What a live attempt holds is part of the worker's usage.
				ws[x.Worker].Used.CPUMillis += x.Resources.CPUMillis
				ws[x.Worker].Used.MemoryBytes += x.Resources.MemoryBytes
				running = append(running, x)
			}
		}
		r := in.request()
		beforeWs, beforeRun := plCloneWorkers(ws), slices.Clone(running)

		w, victims := domain.PickVictims(r, ws, running)
		require.Equal(t, beforeWs, ws, "PickVictims must not change ws")
		require.Equal(t, beforeRun, running, "PickVictims must not change running")

		// candidates on worker i that r may evict; feasible if evicting all
		// of them makes r fit where it did not fit before.
		cands := func(i int) []domain.Running {
			var out []domain.Running
			for _, x := range running {
				if x.Worker == i && plMayPreempt(r.Priority, x.Priority) {
					out = append(out, x)
				}
			}
			return out
		}
		feasible := func(i int) bool {
			return plMatchesAll(r.Constraints, ws[i].Labels) && !plFits(ws[i], r.Resources) &&
				plFits(plEvict(ws[i], cands(i)), r.Resources)
		}

		if w < 0 {
			require.Equal(t, -1, w)
			require.Empty(t, victims)
			for i := range ws {
				require.False(t, feasible(i), "no victims chosen, but evicting all %v on worker %d makes room", plIDs(cands(i)), i)
			}
			return
		}
		require.Less(t, w, len(ws))
		require.NotEmpty(t, victims)
		require.True(t, plMatchesAll(r.Constraints, ws[w].Labels), "worker %d fails the constraints", w)
		seen := map[int64]bool{}
		for _, v := range victims {
			require.Equal(t, w, v.Worker, "victim %d is not on the chosen worker", v.AttemptID)
			require.True(t, plMayPreempt(r.Priority, v.Priority), "%s may not preempt %s", r.Priority, v.Priority)
			require.False(t, seen[v.AttemptID], "victim %d listed twice", v.AttemptID)
			seen[v.AttemptID] = true
			require.Contains(t, running, v, "victim is a running attempt")
		}
		require.True(t, plFits(plEvict(ws[w], victims), r.Resources), "after evicting %v the request does not fit", plIDs(victims))
		require.False(t, plFits(plEvict(ws[w], victims[:len(victims)-1]), r.Resources),
			"the last victim %d was not needed", victims[len(victims)-1].AttemptID)
		// Fewest victims: no worker's full candidate set could make room
		// with fewer evictions than were chosen.
		for i := range ws {
			if feasible(i) {
				require.LessOrEqual(t, len(victims), len(cands(i)), "worker %d makes room with all of %v", i, plIDs(cands(i)))
			}
		}
	})
}

// A task of an optional plugin is placed only where a worker advertises it
// (PluginLabel(plugin)="true"); without one it waits with the reason "no
// worker runs plugin container". Other plugins run everywhere.
func TestPlacementByPlugin(t *testing.T) {
	t.Parallel()
	bare := plWorker("bare", 4)
	off := plWorker("off", 4, "plugin.container", "false")
	docker := plWorker("docker", 1, "plugin.container", "true", "zone", "a")
	tests := []struct {
		name   string
		r      domain.TaskRequest
		ws     []domain.WorkerView
		want   int
		reason string
	}{
		{"container: no worker advertises it", domain.TaskRequest{Plugin: domain.PluginContainer},
			[]domain.WorkerView{bare, off}, -1, "no worker runs plugin container"},
		{"container: placed on the labelled worker despite fewer free slots", domain.TaskRequest{Plugin: domain.PluginContainer},
			[]domain.WorkerView{bare, docker}, 1, ""},
		{"container: the labelled worker fails an explicit constraint",
			domain.TaskRequest{Plugin: domain.PluginContainer, Constraints: []domain.Constraint{{Key: "zone", Op: domain.OpEQ, Value: "b"}}},
			[]domain.WorkerView{bare, docker}, -1, "no worker matches constraint zone EQ b"},
		{"container: no worker at all", domain.TaskRequest{Plugin: domain.PluginContainer}, nil, -1,
			"no worker is registered and alive"},
		{"shell runs on every worker", domain.TaskRequest{Plugin: domain.PluginShell}, []domain.WorkerView{bare, off}, 0, ""},
		{"an empty plugin is not optional", domain.TaskRequest{}, []domain.WorkerView{off}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			i, reason := domain.Place(tc.r, plCloneWorkers(tc.ws))
			require.Equal(t, tc.want, i)
			require.Equal(t, tc.reason, reason)
		})
	}
	require.True(t, docker.RunsPlugin(domain.PluginContainer))
	require.False(t, off.RunsPlugin(domain.PluginContainer), `only "true" advertises a plugin`)
	require.True(t, bare.RunsPlugin(domain.PluginHTTP))

	_, reason := domain.PlaceGang([]domain.TaskRequest{{Plugin: domain.PluginContainer}}, []domain.WorkerView{bare})
	require.Equal(t, "coscheduled: 0 of 1 tasks fit; no worker runs plugin container", reason)
	w, victims := domain.PickVictims(domain.TaskRequest{Plugin: domain.PluginContainer, Priority: plProduction},
		[]domain.WorkerView{plWorker("full", 0)}, []domain.Running{{AttemptID: 1, Worker: 0, Priority: plBatch, Started: true}})
	require.Equal(t, -1, w, "preemption never frees a worker that does not run the plugin")
	require.Empty(t, victims)
}

func TestStepRequestCarriesPlugin(t *testing.T) {
	t.Parallel()
	require.Equal(t, domain.PluginContainer, domain.Step{Plugin: domain.PluginContainer}.Request().Plugin)
	require.Equal(t, 7, domain.Step{}.SystemFailuresAllowed(7), "the scheduler's default when the step sets none")
	zero := 0
	require.Equal(t, 0, domain.Step{MaxSystemFailures: &zero}.SystemFailuresAllowed(7))
}
