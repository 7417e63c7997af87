package agent_test

import (
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/stretchr/testify/require"
)

// Reports made while a batch is in flight travel together in the next one,
// each attempt's in order.
func TestReportsTravelInBatches(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	fake.batchLatency = 100 * time.Millisecond
	f := run(t, fake, agent.Config{Slots: 10})
	worker := f.agent.WorkerID()
	for id := int64(31); id <= 40; id++ {
		fake.addAttempt(shell(id, worker, "true"))
		f.enqueue(t, id)
	}
	for id := int64(31); id <= 40; id++ {
		f.awaitState(t, id, api.TaskStateSUCCEEDED)
		require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateRUNNING, api.TaskStateSUCCEEDED},
			fake.states(id), "attempt %d", id)
	}
	sizes, total := fake.batchSizes(), 0
	for _, n := range sizes {
		total += n
	}
	require.Equal(t, 30, total, "every report once: %v", sizes)
	require.Less(t, len(sizes), 30, "fewer requests than reports: %v", sizes)
}
