package domain

import (
	"cmp"
	"maps"
	"slices"
)

// Fair-share weights of a project: PUT /v1/projects/{p}/fair-share takes
// MinFairWeight..MaxFairWeight; a project that set none weighs
// DefaultFairWeight.
const (
	MinFairWeight     = 1
	MaxFairWeight     = 1000
	DefaultFairWeight = 1
)

// ValidFairWeight reports whether w may be a project's fair-share weight.
func ValidFairWeight(w int) bool { return w >= MinFairWeight && w <= MaxFairWeight }

// FairUnit is a placement unit (one task, or a coscheduled gang's tasks) as
// the fair-share order sees it: its band, its project, its run's fairness
// key, the id of its oldest task, and its size in tasks.
type FairUnit struct {
	Band    Priority
	Project string
	Key     string
	Oldest  int64
	Size    int
}

// FairGroup names one fairness key of one project.
type FairGroup struct {
	Project, Key string
}

// FairStanding is what the fair-share order starts a pass from: the
// projects' weights (absent or out of range: DefaultFairWeight) and the
// tasks each project and each of its fairness keys holds live (ASSIGNED,
// BUILDING, RUNNING) on the workers, in every band.
type FairStanding struct {
	Weights  map[string]int
	Live     map[string]int
	LiveKeys map[FairGroup]int
}

// FairOrder returns the indexes of units in the order placement takes them
// up (Hatchet's round robin across groups, weighted as Slurm's and
// Kueue's fair share weigh a tenant's usage by its share):
//
//   - bands strictly first: every unit of a higher band before any unit of
//     a lower one;
//   - within a band, the next unit is the project's whose usage per weight,
//     (live + taken) / weight, is the lowest, where taken counts the tasks
//     of the units this order already took (in any band); a tie goes to
//     the project whose next unit is the oldest;
//   - within that project, the fairness key's whose live + taken tasks are
//     the fewest (keys weigh alike), a tie to the oldest next unit;
//   - within a key, oldest first (by Oldest); a gang is one unit, whole,
//     and counts its Size.
//
// So a project with no task live comes first in its band whatever another
// project's backlog, and two projects of weights 2 and 1 with nothing live
// take units 2:1. Units of one band, project and key keep their given
// order when their Oldest ties; projects that tie on both go by name.
func FairOrder(units []FairUnit, st FairStanding) []int {
	o := fairOrder{units: units, st: st, taken: map[string]int{}, takenKeys: map[FairGroup]int{}}
	bands := map[Priority]map[string]*fairTenant{}
	lanes := map[FairUnit]*fairLane{} // by band, project and key
	for i, u := range units {
		g := FairUnit{Band: u.Band, Project: u.Project, Key: u.Key}
		l, ok := lanes[g]
		if !ok {
			if bands[u.Band] == nil {
				bands[u.Band] = map[string]*fairTenant{}
			}
			t := bands[u.Band][u.Project]
			if t == nil {
				t = &fairTenant{project: u.Project}
				bands[u.Band][u.Project] = t
			}
			l = &fairLane{key: u.Key}
			t.lanes = append(t.lanes, l)
			lanes[g] = l
		}
		l.idx = append(l.idx, i)
	}
	for _, l := range lanes {
		slices.SortStableFunc(l.idx, func(a, b int) int { return cmp.Compare(units[a].Oldest, units[b].Oldest) })
	}
	out := make([]int, 0, len(units))
	for _, band := range slices.SortedFunc(maps.Keys(bands), func(a, b Priority) int { return cmp.Compare(b, a) }) {
		tenants := slices.SortedFunc(maps.Values(bands[band]), func(a, b *fairTenant) int {
			return cmp.Compare(a.project, b.project)
		})
		for {
			i, ok := o.next(tenants)
			if !ok {
				break
			}
			out = append(out, i)
		}
	}
	return out
}

// fairOrder is FairOrder's state: what it took of each project and key.
type fairOrder struct {
	units     []FairUnit
	st        FairStanding
	taken     map[string]int
	takenKeys map[FairGroup]int
}

// fairTenant is one project's units of one band, by fairness key.
type fairTenant struct {
	project string
	lanes   []*fairLane
}

// fairLane is one fairness key's units of one band and project, oldest
// first; next is the first not taken.
type fairLane struct {
	key  string
	idx  []int
	next int
}

// next takes the next unit of a band's tenants (see FairOrder); ok is
// false when none is left.
func (o *fairOrder) next(tenants []*fairTenant) (int, bool) {
	var best *fairTenant
	var bestLane *fairLane
	for _, t := range tenants {
		l := o.lane(t)
		if l == nil {
			continue
		}
		if best == nil || o.before(t.project, best.project, o.head(l), o.head(bestLane)) {
			best, bestLane = t, l
		}
	}
	if best == nil {
		return 0, false
	}
	i := bestLane.idx[bestLane.next]
	bestLane.next++
	o.taken[best.project] += o.units[i].Size
	o.takenKeys[FairGroup{best.project, bestLane.key}] += o.units[i].Size
	return i, true
}

// lane returns, of t's lanes with a unit left, the one whose key holds the
// fewest tasks live or taken, a tie to the oldest next unit; nil when none
// has a unit left.
func (o *fairOrder) lane(t *fairTenant) *fairLane {
	var best *fairLane
	var bestUsed int
	for _, l := range t.lanes {
		if l.next == len(l.idx) {
			continue
		}
		g := FairGroup{t.project, l.key}
		used := o.st.LiveKeys[g] + o.takenKeys[g]
		if best == nil || used < bestUsed || used == bestUsed && o.head(l) < o.head(best) {
			best, bestUsed = l, used
		}
	}
	return best
}

// before reports whether project a goes before project b: a lower usage
// per weight (compared as cross products), else an older next unit (ha
// and hb, their next units' Oldest).
func (o *fairOrder) before(a, b string, ha, hb int64) bool {
	ua, ub := int64(o.st.Live[a]+o.taken[a]), int64(o.st.Live[b]+o.taken[b])
	wa, wb := int64(o.weight(a)), int64(o.weight(b))
	if c := cmp.Compare(ua*wb, ub*wa); c != 0 {
		return c < 0
	}
	return ha < hb
}

func (o *fairOrder) head(l *fairLane) int64 { return o.units[l.idx[l.next]].Oldest }

// weight is project p's weight, DefaultFairWeight when it has none valid.
func (o *fairOrder) weight(p string) int {
	if w, ok := o.st.Weights[p]; ok && ValidFairWeight(w) {
		return w
	}
	return DefaultFairWeight
}
