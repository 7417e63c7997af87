package domain_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// fu builds a unit of one task: "A/k@3" is project A, key k, oldest task 3
// (interactive band; "A@3" has no key).
func fu(band domain.Priority, spec string) domain.FairUnit {
	head, id, _ := strings.Cut(spec, "@")
	project, key, _ := strings.Cut(head, "/")
	var n int64
	fmt.Sscan(id, &n)
	return domain.FairUnit{Band: band, Project: project, Key: key, Oldest: n, Size: 1}
}

func fus(specs ...string) []domain.FairUnit {
	out := make([]domain.FairUnit, len(specs))
	for i, s := range specs {
		out[i] = fu(domain.PriorityInteractive, s)
	}
	return out
}

// ordered renders units in FairOrder's order, as fu's specs.
func ordered(units []domain.FairUnit, st domain.FairStanding) []string {
	var out []string
	for _, i := range domain.FairOrder(units, st) {
		u := units[i]
		s := u.Project
		if u.Key != "" {
			s += "/" + u.Key
		}
		out = append(out, fmt.Sprintf("%s@%d", s, u.Oldest))
	}
	return out
}

func TestFairOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		rule  string
		units []domain.FairUnit
		st    domain.FairStanding
		want  []string
	}{{
		name:  "one group keeps oldest first",
		rule:  "within a key, oldest first",
		units: fus("A@3", "A@1", "A@2"),
		want:  []string{"A@1", "A@2", "A@3"},
	}, {
		name:  "equal projects alternate, the oldest first",
		rule:  "the next unit is the project's whose usage per weight is the lowest; a tie goes to the project whose next unit is the oldest",
		units: fus("A@1", "A@2", "A@3", "B@10", "B@11"),
		want:  []string{"A@1", "B@10", "A@2", "B@11", "A@3"},
	}, {
		name:  "a project with nothing live comes first whatever the other's backlog",
		rule:  "a project with no task live comes first in its band whatever another project's backlog",
		units: fus("A@1", "A@2", "A@3", "B@900"),
		st:    domain.FairStanding{Live: map[string]int{"A": 40}},
		want:  []string{"B@900", "A@1", "A@2", "A@3"},
	}, {
		name:  "live usage is weighed: 40 and 41 live of weight 50 stay below 1 live of weight 1",
		rule:  "usage per weight, (live + taken) / weight",
		units: fus("A@1", "A@2", "B@5"),
		st:    domain.FairStanding{Live: map[string]int{"A": 40, "B": 1}, Weights: map[string]int{"A": 50}},
		want:  []string{"A@1", "A@2", "B@5"},
	}, {
		name:  "weights 2 and 1 with nothing live take units 2:1",
		rule:  "two projects of weights 2 and 1 with nothing live take units 2:1",
		units: fus("A@1", "A@2", "A@3", "A@4", "B@10", "B@11", "B@12"),
		st:    domain.FairStanding{Weights: map[string]int{"A": 2}},
		want:  []string{"A@1", "B@10", "A@2", "A@3", "B@11", "A@4", "B@12"},
	}, {
		name:  "a weight out of range weighs the default",
		rule:  "absent or out of range: DefaultFairWeight",
		units: fus("A@1", "A@2", "B@10", "B@11"),
		st:    domain.FairStanding{Weights: map[string]int{"A": 5000}},
		want:  []string{"A@1", "B@10", "A@2", "B@11"},
	}, {
		name:  "keys interleave within a project",
		rule:  "within that project, the fairness key's whose live + taken tasks are the fewest, a tie to the oldest next unit",
		units: fus("A/x@1", "A/x@2", "A/x@3", "A/y@7", "A/y@8"),
		want:  []string{"A/x@1", "A/y@7", "A/x@2", "A/y@8", "A/x@3"},
	}, {
		name:  "a key with tasks live waits behind one with none",
		rule:  "the fairness key's whose live + taken tasks are the fewest",
		units: fus("A/x@1", "A/x@2", "A/y@7"),
		st:    domain.FairStanding{Live: map[string]int{"A": 3}, LiveKeys: map[domain.FairGroup]int{{Project: "A", Key: "x"}: 3}},
		want:  []string{"A/y@7", "A/x@1", "A/x@2"},
	}, {
		name:  "projects first, then keys: a project of many keys does not outweigh one of one key",
		rule:  "within a band, the next unit is the project's ...; within that project, the fairness key's ...",
		units: fus("A/x@1", "A/y@2", "A/z@3", "B@10", "B@11", "B@12"),
		want:  []string{"A/x@1", "B@10", "A/y@2", "B@11", "A/z@3", "B@12"},
	}, {
		name: "bands strictly first",
		rule: "every unit of a higher band before any unit of a lower one",
		units: []domain.FairUnit{fu(domain.PriorityBatch, "A@1"), fu(domain.PriorityProduction, "B@9"),
			fu(domain.PriorityInteractive, "A@2"), fu(domain.PriorityProduction, "A@5")},
		st:   domain.FairStanding{Live: map[string]int{"A": 100}},
		want: []string{"B@9", "A@5", "A@2", "A@1"},
	}, {
		name: "a gang counts its size",
		rule: "a gang is one unit, whole, and counts its Size",
		units: []domain.FairUnit{{Band: 1, Project: "A", Oldest: 1, Size: 4}, {Band: 1, Project: "A", Oldest: 5, Size: 1},
			{Band: 1, Project: "B", Oldest: 10, Size: 1}, {Band: 1, Project: "B", Oldest: 11, Size: 1},
			{Band: 1, Project: "B", Oldest: 12, Size: 1}},
		want: []string{"A@1", "B@10", "B@11", "B@12", "A@5"},
	}, {
		name:  "taken counts across bands",
		rule:  "taken counts the tasks of the units this order already took (in any band)",
		units: []domain.FairUnit{fu(2, "A@1"), fu(2, "A@2"), fu(1, "A@3"), fu(1, "B@10"), fu(1, "B@11")},
		want:  []string{"A@1", "A@2", "B@10", "B@11", "A@3"},
	}, {
		name:  "no units",
		rule:  "nothing to order",
		units: nil,
		want:  nil,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, ordered(tc.units, tc.st), tc.rule)
		})
	}
}

// FuzzFairOrder checks FairOrder's invariants: it returns every unit once,
// bands never go up, and within a band, project and key the units stay
// oldest first.
func FuzzFairOrder(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, uint8(3), uint8(2))
	f.Fuzz(func(t *testing.T, raw []byte, live, weight uint8) {
		units := make([]domain.FairUnit, len(raw))
		for i, b := range raw {
			units[i] = domain.FairUnit{Band: domain.Priority(b % 3), Project: string(rune('A' + b%4)),
				Key: string(rune('x' + b/4%3)), Oldest: int64(i), Size: 1 + int(b/16%3)}
		}
		st := domain.FairStanding{Live: map[string]int{"A": int(live)}, Weights: map[string]int{"B": int(weight)}}
		order := domain.FairOrder(units, st)
		require.Len(t, order, len(units))
		sorted := slices.Clone(order)
		slices.Sort(sorted)
		for i, v := range sorted {
			require.Equal(t, i, v)
		}
		last := map[domain.FairUnit]int64{}
		for n, i := range order {
			u := units[i]
			if n > 0 {
				require.LessOrEqual(t, u.Band, units[order[n-1]].Band)
			}
			g := domain.FairUnit{Band: u.Band, Project: u.Project, Key: u.Key}
			if prev, ok := last[g]; ok {
				require.Less(t, prev, u.Oldest)
			}
			last[g] = u.Oldest
		}
	})
}
