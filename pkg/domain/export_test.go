package domain

import (
	"testing"
	"time"
)

// RaiseBatchTime sets the deadline of one decision's evaluations to d for
// t, a test of cost alone that must not fail on a starved machine. t must
// not be parallel: parallel tests start after it ends, and see the default.
func RaiseBatchTime(t *testing.T, d time.Duration) {
	batchTime = d
	t.Cleanup(func() { batchTime = MaxBatchTime })
}
