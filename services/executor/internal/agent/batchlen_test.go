package agent

import (
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/stretchr/testify/require"
)

// A batch is cut at maxBatch reports and at maxBatchBytes by the reports'
// worst-case sizes; a report bigger than that goes alone.
func TestBatchLenBoundsCountAndBytes(t *testing.T) {
	small := &pendingReport{size: reportSize(workerapi.AttemptReport{State: api.TaskStateRUNNING})}
	big := strings.Repeat("x", 1<<20) // 6 MiB at worst
	large := &pendingReport{size: reportSize(workerapi.AttemptReport{State: api.TaskStateSUCCEEDED, Stdout: &big})}
	require.Greater(t, large.size, 6<<20)

	queue := make([]*pendingReport, 700)
	for i := range queue {
		queue[i] = small
	}
	require.Equal(t, maxBatch, batchLen(queue))
	require.Equal(t, 3, batchLen(queue[:3]))

	require.Equal(t, 1, batchLen([]*pendingReport{large, large, small}), "two large ones exceed the bytes")
	require.Equal(t, 2, batchLen([]*pendingReport{large, small, large}))
	huge := &pendingReport{size: maxBatchBytes + 1}
	require.Equal(t, 1, batchLen([]*pendingReport{huge, small}), "a report bigger than a batch goes alone")
}
