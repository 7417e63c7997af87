package domain_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

const (
	me    = "w-1"
	other = "w-2"
)

// current is the facts of a task's current attempt, number 1, in state s
// on worker me, its task in the same state.
func current(s domain.TaskState) domain.AttemptFacts {
	return domain.AttemptFacts{State: s, Number: 1, WorkerID: me, TaskState: s, AttemptCount: 1}
}

func TestDecideReport(t *testing.T) {
	t.Parallel()
	aborted := current(domain.TaskRunning)
	aborted.TaskState = domain.TaskKilled
	superseded := current(domain.TaskRunning)
	superseded.AttemptCount = 2
	unplaced := current(domain.TaskAssigned)
	unplaced.WorkerID = ""
	apply := func(proceed, evaluate bool) domain.ReportDecision {
		return domain.ReportDecision{Verdict: domain.ReportApply, Proceed: proceed, MoveTask: proceed, Evaluate: evaluate}
	}
	cases := []struct {
		rule   string // the rule, quoted from the design notes
		facts  domain.AttemptFacts
		worker string
		next   domain.TaskState
		want   domain.ReportDecision
	}{
		{"an item about an attempt placed on another worker is refused", current(domain.TaskRunning), other,
			domain.TaskSucceeded, domain.ReportDecision{Verdict: domain.ReportNotHeld}},
		{"an item about an attempt placed on no worker is refused", unplaced, me, domain.TaskRunning,
			domain.ReportDecision{Verdict: domain.ReportNotHeld}},
		{"a report on an attempt that already ended is a no-op", current(domain.TaskSucceeded), me,
			domain.TaskFailed, domain.ReportDecision{Verdict: domain.ReportIgnore}},
		{"a report on an attempt that already ended is a no-op (lone report)", current(domain.TaskKilled), "",
			domain.TaskRunning, domain.ReportDecision{Verdict: domain.ReportIgnore}},
		{"a report of the state an attempt is in is a no-op that evaluates nothing again",
			current(domain.TaskRunning), me, domain.TaskRunning,
			domain.ReportDecision{Verdict: domain.ReportIgnore, Proceed: true}},
		{"a report of BUILDING when it runs is a no-op", current(domain.TaskRunning), me, domain.TaskBuilding,
			domain.ReportDecision{Verdict: domain.ReportIgnore, Proceed: true}},
		{"a lone report names no worker: RUNNING again is taken", current(domain.TaskRunning), "",
			domain.TaskRunning, apply(true, false)},
		{"a lone report of BUILDING when it runs cannot follow", current(domain.TaskRunning), "",
			domain.TaskBuilding, domain.ReportDecision{Verdict: domain.ReportCannotFollow}},
		{"a PENDING report is ignored, so that an ASSIGNED task does not regress (Iris)", current(domain.TaskAssigned), me,
			domain.TaskPending, domain.ReportDecision{Verdict: domain.ReportIgnore, Proceed: true}},
		{"a PENDING report of a running attempt is ignored (lone report)", current(domain.TaskRunning), "",
			domain.TaskPending, domain.ReportDecision{Verdict: domain.ReportIgnore, Proceed: true}},
		{"a PENDING report of a superseded attempt is ignored, and it must stop", superseded, me,
			domain.TaskPending, domain.ReportDecision{Verdict: domain.ReportIgnore}},
		{"ASSIGNED -> BUILDING moves the task and proceeds", current(domain.TaskAssigned), me,
			domain.TaskBuilding, apply(true, false)},
		{"ASSIGNED -> RUNNING moves the task and proceeds", current(domain.TaskAssigned), me, domain.TaskRunning,
			apply(true, false)},
		{"the attempt ended: the scheduler decides the task's fate", current(domain.TaskRunning), me,
			domain.TaskFailed, apply(false, true)},
		{"a short attempt may end from ASSIGNED", current(domain.TaskAssigned), me, domain.TaskSucceeded,
			apply(false, true)},
		{"proceed: false makes the executor kill the attempt, which closes the race between an abort and a start",
			func() domain.AttemptFacts { f := aborted; f.State = domain.TaskAssigned; return f }(), me,
			domain.TaskRunning, domain.ReportDecision{Verdict: domain.ReportApply}},
		{"the end of an aborted task's current attempt is evaluated, to finish the abort", aborted, me,
			domain.TaskKilled, domain.ReportDecision{Verdict: domain.ReportApply, Evaluate: true}},
		{"a superseded attempt must stop", func() domain.AttemptFacts { f := superseded; f.State = domain.TaskAssigned; return f }(),
			me, domain.TaskRunning, domain.ReportDecision{Verdict: domain.ReportApply}},
		{"a superseded attempt's end needs no decision", superseded, me, domain.TaskSucceeded,
			domain.ReportDecision{Verdict: domain.ReportApply}},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			d := domain.DecideReport(tc.facts, tc.worker, tc.next)
			require.Equal(t, tc.want, d)
			require.Equal(t, tc.want.Verdict >= domain.ReportUnknown, d.Refused())
		})
	}
}

// CanReport is Iris's worker-reported transitions: an attempt moves
// forward only, ASSIGNED → BUILDING → RUNNING → a terminal state; BUILDING
// may come again while building ("Later, BUILDING again when dependency
// sync starts") but never after RUNNING; an attempt that ended takes no
// report; PENDING is never taken (the controller ignores it).
func TestCanReport(t *testing.T) {
	t.Parallel()
	terminal := []domain.TaskState{domain.TaskSucceeded, domain.TaskFailed, domain.TaskKilled,
		domain.TaskWorkerFailed, domain.TaskUnschedulable, domain.TaskPreempted}
	cases := []struct {
		rule      string
		cur, next domain.TaskState
		want      bool
	}{
		{"ASSIGNED -> BUILDING: the worker starts the task", domain.TaskAssigned, domain.TaskBuilding, true},
		{"ASSIGNED -> RUNNING: a task with nothing to build", domain.TaskAssigned, domain.TaskRunning, true},
		{"BUILDING -> BUILDING: dependency sync after the bundle download", domain.TaskBuilding, domain.TaskBuilding, true},
		{"BUILDING -> RUNNING: the user command starts", domain.TaskBuilding, domain.TaskRunning, true},
		{"RUNNING -> RUNNING: a repeated report", domain.TaskRunning, domain.TaskRunning, true},
		{"RUNNING -> BUILDING: never backwards", domain.TaskRunning, domain.TaskBuilding, false},
		{"ASSIGNED -> PENDING: ignored, an ASSIGNED task must not regress", domain.TaskAssigned, domain.TaskPending, false},
		{"RUNNING -> PENDING: never backwards", domain.TaskRunning, domain.TaskPending, false},
		{"ASSIGNED -> ASSIGNED: the scheduler's state, not a worker's", domain.TaskAssigned, domain.TaskAssigned, false},
		{"RUNNING -> UNSPECIFIED: never used in practice", domain.TaskRunning, domain.TaskUnspecified, false},
	}
	for _, end := range terminal {
		for _, from := range []domain.TaskState{domain.TaskAssigned, domain.TaskBuilding, domain.TaskRunning} {
			cases = append(cases, struct {
				rule      string
				cur, next domain.TaskState
				want      bool
			}{from.String() + " -> " + end.String() + ": the attempt ends", from, end, true})
		}
		for _, next := range []domain.TaskState{domain.TaskBuilding, domain.TaskRunning, domain.TaskFailed, domain.TaskSucceeded} {
			cases = append(cases, struct {
				rule      string
				cur, next domain.TaskState
				want      bool
			}{end.String() + " -> " + next.String() + ": an attempt that ended takes no report", end, next, false})
		}
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, domain.CanReport(tc.cur, tc.next))
		})
	}
}

// A batch applies in order, each report over what the earlier ones left:
// "a noop's RUNNING and SUCCEEDED" land in one batch, and "a batch resent
// after a lost answer changes nothing".
func TestDecideReports(t *testing.T) {
	t.Parallel()
	facts := map[int64]domain.AttemptFacts{1: current(domain.TaskAssigned), 2: current(domain.TaskAssigned)}
	batch := []domain.AttemptReport{{AttemptID: 1, State: domain.TaskRunning}, {AttemptID: 2, State: domain.TaskRunning},
		{AttemptID: 1, State: domain.TaskSucceeded}, {AttemptID: 2, State: domain.TaskRunning}, {AttemptID: 3, State: domain.TaskRunning}}
	got := domain.DecideReports(facts, me, batch)
	require.Equal(t, []domain.ReportDecision{
		{Verdict: domain.ReportApply, Proceed: true, MoveTask: true},
		{Verdict: domain.ReportApply, Proceed: true, MoveTask: true},
		{Verdict: domain.ReportApply, Evaluate: true},
		{Verdict: domain.ReportIgnore, Proceed: true},
		{Verdict: domain.ReportUnknown},
	}, got)
	require.Equal(t, current(domain.TaskAssigned), facts[1], "the facts are not changed")

	after := map[int64]domain.AttemptFacts{1: applied(facts[1], domain.TaskRunning, domain.TaskSucceeded),
		2: current(domain.TaskRunning)}
	for i, d := range domain.DecideReports(after, me, batch) {
		require.NotEqual(t, domain.ReportApply, d.Verdict, "resent item %d", i)
		require.False(t, d.Evaluate, "resent item %d", i)
	}
}

// applied is f after its task's current attempt took states in order, its
// task moving with it while live.
func applied(f domain.AttemptFacts, states ...domain.TaskState) domain.AttemptFacts {
	for _, s := range states {
		f.State = s
		if !s.IsTerminal() {
			f.TaskState = s
		}
	}
	return f
}

// Invariants of any batch: an applied report moves its attempt forward
// only (CanReport); only an applied report moves the task or asks an
// evaluation, a live one the task, a terminal one the evaluation; proceed
// is never the answer to a terminal report or a refusal; and a batch
// resent by its worker over the facts it left applies nothing.
func FuzzDecideReports(f *testing.F) {
	f.Add([]byte{9, 9, 3, 3, 4}, []byte{0, 0, 1, 0}, uint64(1))
	f.Add([]byte{2, 3, 6, 7}, []byte{1, 2, 3, 1, 2}, uint64(2))
	f.Add([]byte{1, 0, 10, 5, 8}, []byte{}, uint64(3))
	f.Fuzz(func(t *testing.T, states, ids []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 7))
		facts := map[int64]domain.AttemptFacts{}
		for id := int64(1); id <= 3; id++ {
			n := r.IntN(3) + 1
			facts[id] = domain.AttemptFacts{State: domain.TaskState(r.IntN(11)), Number: n,
				WorkerID: []string{me, other, ""}[r.IntN(3)], TaskState: domain.TaskState(r.IntN(11)),
				AttemptCount: n + r.IntN(2)}
		}
		if len(states) > 64 {
			states = states[:64]
		}
		batch := make([]domain.AttemptReport, len(states))
		for i, s := range states {
			id := int64(1)
			if i < len(ids) {
				id = int64(ids[i]%4) + 1 // 4: unknown
			}
			batch[i] = domain.AttemptReport{AttemptID: id, State: domain.TaskState(s % 11)}
		}
		for _, worker := range []string{me, ""} {
			now := map[int64]domain.AttemptFacts{}
			for id, f := range facts {
				now[id] = f
			}
			for i, d := range domain.DecideReports(facts, worker, batch) {
				rep := batch[i]
				fa, known := now[rep.AttemptID]
				require.Equal(t, !known, d.Verdict == domain.ReportUnknown)
				if d.Verdict == domain.ReportApply {
					require.True(t, domain.CanReport(fa.State, rep.State), "forward only")
					fa.State = rep.State
					if d.MoveTask {
						fa.TaskState = rep.State
					}
					now[rep.AttemptID] = fa
				} else {
					require.False(t, d.MoveTask || d.Evaluate, "only an applied report moves or evaluates")
				}
				require.False(t, d.MoveTask && rep.State.IsTerminal(), "a terminal report does not move the task")
				require.False(t, d.Evaluate && !rep.State.IsTerminal(), "only an end is evaluated")
				require.False(t, d.Proceed && (rep.State.IsTerminal() || d.Refused()), "no proceed to an end or a refusal")
			}
			if worker == "" {
				continue // a lone report is not taken for a resent one
			}
			for i, d := range domain.DecideReports(now, worker, batch) {
				require.NotEqual(t, domain.ReportApply, d.Verdict, "resent item %d applied again", i)
			}
		}
	})
}
