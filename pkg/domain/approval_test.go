package domain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

func TestCheckApproval(t *testing.T) {
	t.Parallel()
	waiting := domain.ApprovalWait{Kind: domain.KindApproval, Phase: domain.PhasePaused, WaitsForApproval: true}
	with := func(edit func(*domain.ApprovalWait)) domain.ApprovalWait { w := waiting; edit(&w); return w }
	cases := []struct {
		rule     string // the rule, quoted from the design notes and the API
		wait     domain.ApprovalWait
		decision string
		want     error
	}{
		{"approve records the approval of an approval step that waits", waiting, domain.DecisionApproved, nil},
		{"reject records the rejection of an approval step that waits", waiting, domain.DecisionRejected, nil},
		{"409 not_waiting_for_approval for anything else: a task step", with(func(w *domain.ApprovalWait) {
			w.Kind = domain.KindTask
		}), domain.DecisionApproved, domain.ErrNotWaiting},
		{"an approval step not yet started", with(func(w *domain.ApprovalWait) {
			w.Phase, w.WaitsForApproval = domain.PhaseQueued, false
		}), domain.DecisionApproved, domain.ErrNotWaiting},
		{"an approval step that ended", with(func(w *domain.ApprovalWait) {
			w.Phase, w.WaitsForApproval = domain.PhaseSucceeded, false
		}), domain.DecisionRejected, domain.ErrNotWaiting},
		{"PAUSED, but for a resume of the run", with(func(w *domain.ApprovalWait) { w.WaitsForApproval = false }),
			domain.DecisionApproved, domain.ErrNotWaiting},
		{"a decision is recorded once: already decided", with(func(w *domain.ApprovalWait) { w.Decided = true }),
			domain.DecisionRejected, domain.ErrNotWaiting},
		{"a decision is approved or rejected", waiting, "maybe", domain.ErrUnknownDecision},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			err := domain.CheckApproval(tc.wait, tc.decision)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestApprovalOutcome(t *testing.T) {
	t.Parallel()
	approved, rejected := domain.DecisionApproved, domain.DecisionRejected
	cases := []struct {
		rule     string // the rule, quoted from the API
		decision *string
		to       domain.Phase
		reason   string
		ended    bool
	}{
		{"the approval step waits for an approve or a reject", nil, "", "", false},
		{"the scheduler ends the step SUCCEEDED", &approved, domain.PhaseSucceeded, "", true},
		{"the scheduler fails the step with reason rejected", &rejected, domain.PhaseFailed, "rejected", true},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			to, reason, ended := domain.ApprovalOutcome(tc.decision)
			require.Equal(t, tc.to, to)
			require.Equal(t, tc.reason, reason)
			require.Equal(t, tc.ended, ended)
		})
	}
}
