package store_test

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// TestStepChildren checks the read a workflow step's progression makes of
// its children: the latest try of each index, with its index, generation
// and the count of its index's children in that generation; and GetRun's
// list of every child, by step, index and try.
func TestStepChildren(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "w", Kind: domain.KindWorkflow,
		Workflow: &domain.WorkflowRef{Name: "leaf"}}}}
	spec.Normalize()
	parent := domain.RunKey{Project: "p", Domain: "d", Run: "parent"}
	_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: parent, Spec: spec})
	require.NoError(t, err)
	leaf := domain.WorkflowSpec{Steps: []domain.Step{{Name: "t", Plugin: domain.PluginNoop}}}
	leaf.Normalize()
	child := func(index, generation, try int) store.NewRun {
		return store.NewRun{Key: domain.RunKey{Project: "p", Domain: "d",
			Run: domain.ChildRunName("parent", "w", index, try)}, Spec: leaf,
			Child: &store.ChildOf{Parent: parent.Action("w"), Index: index, Generation: generation, Try: try, Depth: 1}}
	}
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return tx.Runs().CreateChildRuns(ctx, []store.NewRun{child(0, 0, 0), child(1, 0, 0), child(1, 0, 1),
			child(2, 0, 0), child(2, 1, 1)})
	}))
	kids, err := st.Runs().StepChildren(ctx, parent, []string{"w"})
	require.NoError(t, err)
	got := kids["w"]
	require.Len(t, got, 3, "one per index")
	for i, want := range []struct {
		name            string
		gen, try, tries int
	}{
		{"parent-w-0", 0, 0, 1}, {"parent-w-1-r1", 0, 1, 2}, {"parent-w-2-r1", 1, 1, 1},
	} {
		require.Equal(t, i, got[i].Index)
		require.Equal(t, want.name, got[i].Name)
		require.Equal(t, want.gen, got[i].Generation)
		require.Equal(t, want.try, got[i].Try)
		require.Equal(t, want.tries, got[i].Tries)
		require.Equal(t, domain.PhaseQueued, got[i].Phase)
	}
	d, err := st.Runs().GetRun(ctx, parent)
	require.NoError(t, err)
	require.Len(t, d.Children, 5, "GET run lists every child, every try")
	require.Equal(t, store.RunChild{Name: "parent-w-1-r1", Action: "w", Index: 1, Generation: 0, Try: 1,
		Phase: string(domain.PhaseQueued)}, d.Children[2])
}
