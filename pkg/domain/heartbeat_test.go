package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

func TestLossOnBeat(t *testing.T) {
	t.Parallel()
	prev := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	loss := domain.LossOnBeat(prev)
	cases := []struct {
		rule       string // the rule, quoted from the design notes
		state      domain.TaskState
		reportedAt time.Time
		held       bool
		lost       bool
	}{
		{"a live attempt placed on the worker but absent from the beat ends WORKER_FAILED (its final report was lost)",
			domain.TaskRunning, prev.Add(-2 * time.Second), false, true},
		{"BUILDING is started: absent from the beat, it is lost", domain.TaskBuilding, prev.Add(-time.Minute), false, true},
		{"an attempt the beat holds is not lost", domain.TaskRunning, prev.Add(-time.Minute), true, false},
		{"only an attempt whose last report predates the previous beat is lost: one reported since may have started after the beat was built",
			domain.TaskRunning, prev.Add(time.Second), false, false},
		{"the margin absorbs clock skew between api replicas", domain.TaskRunning, prev.Add(-domain.LostMargin / 2), false, false},
		{"a report exactly the margin before is not older", domain.TaskRunning, prev.Add(-domain.LostMargin), false, false},
		{"BUILDING and RUNNING only: an ASSIGNED attempt may still wait in the queue", domain.TaskAssigned,
			prev.Add(-time.Hour), false, false},
		{"an attempt that ended is not lost", domain.TaskSucceeded, prev.Add(-time.Hour), false, false},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.lost, loss.Lost(tc.state, tc.reportedAt, tc.held))
		})
	}
	require.Equal(t, []domain.TaskState{domain.TaskBuilding, domain.TaskRunning}, loss.States)
	require.Equal(t, prev.Add(-time.Second), loss.ReportedBefore, "Capstan's margin: one second")
}

// Invariants: a beat never loses an attempt it holds, an attempt not
// started, or one reported within the margin of the previous beat; and an
// attempt lost after one beat stays lost after any later one.
func FuzzLossOnBeat(f *testing.F) {
	f.Add(uint8(3), int64(-5000), int64(1000), false)
	f.Add(uint8(2), int64(-1000), int64(0), false)
	f.Add(uint8(9), int64(-90000), int64(60000), true)
	f.Fuzz(func(t *testing.T, state uint8, reportedMs, laterMs int64, held bool) {
		prev := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		s := domain.TaskState(state % 11)
		at := prev.Add(time.Duration(reportedMs%int64(time.Hour/time.Millisecond)) * time.Millisecond)
		lost := domain.LossOnBeat(prev).Lost(s, at, held)
		if lost {
			require.False(t, held)
			require.True(t, s == domain.TaskBuilding || s == domain.TaskRunning)
			require.True(t, at.Before(prev.Add(-domain.LostMargin)))
			later := prev.Add(time.Duration(max(laterMs, 0)%int64(time.Hour/time.Millisecond)) * time.Millisecond)
			require.True(t, domain.LossOnBeat(later).Lost(s, at, held), "a later beat loses it too")
		}
	})
}
