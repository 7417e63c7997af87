package scheduler

import (
	"context"
	"fmt"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/stretchr/testify/require"
)

// One runs:start message starts every run it names, as run:start starts
// one: each run RUNNING with its first step's task; a name of no run is
// skipped, not a failure of the others. Applied again, it changes nothing.
func TestHandleRunsStartsEachRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.Table{0})
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true"}, {Name: "b", Command: "true"}}}
	var names []string
	for i := range 9 {
		names = append(names, f.newRun(t, fmt.Sprintf("r%d", i), spec).Run)
	}
	task := queue.NewRunsStartTask("p", "d", append(names, "missing"))
	for range 2 {
		require.NoError(t, f.s.handleRuns(ctx, task))
		for _, name := range names {
			key := domain.RunKey{Project: "p", Domain: "d", Run: name}
			d, err := f.st.GetRun(ctx, key)
			require.NoError(t, err)
			require.Equal(t, string(domain.PhaseRunning), d.Run.Phase, name)
			require.Len(t, f.tasks(t, key, "a"), 1, name)
			require.Empty(t, f.tasks(t, key, "b"), name)
		}
	}
}
