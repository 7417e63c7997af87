package domain

import (
	"os"
	"testing"
	"time"
)

// TestMain bounds the package's decisions by cost alone, with a deadline a
// starved machine does not reach, so that their verdicts do not depend on
// how busy it is; TestExprBudgetDeadline tests MaxBatchTime itself.
func TestMain(m *testing.M) {
	batchTime = time.Minute
	os.Exit(m.Run())
}
