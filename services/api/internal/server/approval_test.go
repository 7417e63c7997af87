package server

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// A decision is recorded once, with who, when and the comment, on an
// approval step that waits; anything else is ErrNotWaiting.
func TestDecideApproval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newControlFixture(t)
	st := f.store
	key := f.startedRun(t)
	f.waitForApproval(t, key, "b")

	ann := store.Decider{TokenID: "t-1", TokenName: "ops", Label: "ann"}
	_, err := decideApproval(ctx, st, key.Action("a"), domain.DecisionApproved, ann, "")
	require.ErrorIs(t, err, domain.ErrNotWaiting, "a task step")
	_, err = decideApproval(ctx, st, key.Action("b"), "maybe", ann, "")
	require.Error(t, err)

	before := time.Now().UTC()
	a, err := decideApproval(ctx, st, key.Action("b"), domain.DecisionApproved, ann, "looks good")
	require.NoError(t, err)
	got, err := st.Actions().GetAction(ctx, key.Action("b"))
	require.NoError(t, err)
	for _, act := range []store.Action{a, got.Action} {
		require.Equal(t, domain.DecisionApproved, *act.Decision)
		require.Equal(t, "ann", *act.DecidedBy)
		require.Equal(t, "t-1", *act.DecidedByTokenID)
		require.Equal(t, "ops", *act.DecidedByTokenName)
		require.Equal(t, "looks good", *act.DecisionComment)
		require.WithinDuration(t, before, *act.DecidedAt, time.Minute)
		require.Equal(t, string(domain.PhasePaused), act.Phase, "the scheduler moves the phase")
	}
	require.Equal(t, a.Version, got.Action.Version)
	require.Contains(t, f.events(t, key), "action.approved")

	_, err = decideApproval(ctx, st, key.Action("b"), domain.DecisionRejected, store.Decider{Label: "bob"}, "")
	require.ErrorIs(t, err, domain.ErrNotWaiting, "already decided")
	_, err = decideApproval(ctx, st, key.Action("nope"), domain.DecisionRejected, store.Decider{}, "")
	require.ErrorIs(t, err, store.ErrNotFound)

	other := f.startedRun(t)
	f.waitForApproval(t, other, "b")
	r, err := decideApproval(ctx, st, other.Action("b"), domain.DecisionRejected, store.Decider{}, "")
	require.NoError(t, err)
	require.Equal(t, domain.DecisionRejected, *r.Decision)
	require.Nil(t, r.DecidedBy, "nobody named")
	require.Nil(t, r.DecisionComment)
	require.Contains(t, f.events(t, other), "action.rejected")
}
