package domain_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Flyte's executor (TaskActionReconciler): "The reconciler allows up to
// MaxSystemFailures (default 3) ... If the threshold is exceeded, the task is
// moved to PermanentFailure with the code MaxSystemFailuresExceeded." With
// the default a task runs 4 times: 3 system failures retried in place, the
// 4th permanent; the user's failure_count stays 0.
func TestSystemFailureBudgetSequence(t *testing.T) {
	t.Parallel()
	b := defaultBudget()
	var results []domain.RetryResult
	var codes []string
	for range 4 {
		o := domain.AttemptOutcome{State: domain.TaskFailed, System: true}
		var r domain.RetryResult
		b, r = domain.HandleAttemptResult(b, o)
		results = append(results, r)
		codes = append(codes, domain.FailureCode(o, r))
	}
	require.Equal(t, []domain.RetryResult{domain.ShouldRetry, domain.ShouldRetry, domain.ShouldRetry,
		domain.ExceededRetryLimit}, results)
	require.Equal(t, []string{"", "", "", "MaxSystemFailuresExceeded"}, codes)
	require.Equal(t, 0, b.FailureCount, "system failures never charge the user's budget")
	require.Greater(t, b.SystemFailureCount, b.MaxSystemFailures)
}

// The count resets only when an attempt really progresses, never on a loop
// (Flyte's known livelock): system failures whose attempts each reached
// RUNNING before failing still exhaust the budget, while a real run in
// between (RUNNING, then a user failure) starts the count afresh.
func TestSystemFailureResetOnlyOnProgress(t *testing.T) {
	t.Parallel()
	b := defaultBudget()
	b.MaxRetriesFailure = 10
	sys := domain.AttemptOutcome{State: domain.TaskFailed, System: true, Started: true}
	for range 3 {
		var r domain.RetryResult
		b, r = domain.HandleAttemptResult(b, sys)
		require.Equal(t, domain.ShouldRetry, r)
	}
	require.Equal(t, 3, b.SystemFailureCount, "started attempts that fail as system failures never reset")
	b, r := domain.HandleAttemptResult(b, domain.AttemptOutcome{State: domain.TaskFailed, Started: true})
	require.Equal(t, domain.ShouldRetry, r)
	require.Equal(t, 0, b.SystemFailureCount, "a user failure after RUNNING progressed: reset")
	require.Equal(t, 1, b.FailureCount)
	for range 4 {
		b, r = domain.HandleAttemptResult(b, sys)
	}
	require.Equal(t, domain.ExceededRetryLimit, r, "the loop ends: 4 system failures in a row exceed 3")
	require.Equal(t, domain.CodeMaxSystemFailuresExceeded, domain.FailureCode(sys, r))
}

func TestOutcomeProgressed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		o    domain.AttemptOutcome
		want bool
	}{
		{"never reached RUNNING", domain.AttemptOutcome{State: domain.TaskSucceeded}, false},
		{"RUNNING then SUCCEEDED", domain.AttemptOutcome{State: domain.TaskSucceeded, Started: true}, true},
		{"RUNNING then a user failure", domain.AttemptOutcome{State: domain.TaskFailed, Started: true}, true},
		{"RUNNING then a system failure: no progress", domain.AttemptOutcome{State: domain.TaskFailed, System: true, Started: true}, false},
		{"RUNNING then WORKER_FAILED", domain.AttemptOutcome{State: domain.TaskWorkerFailed, Started: true}, true},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, tc.o.Progressed(), tc.name)
	}
}

func TestValidCode(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"MaxSystemFailuresExceeded": true, "InvalidPluginSpec": true, "E1": true, "x": true,
		"": false, "1E": false, "Bad-Code": false, "with space": false, "é": false,
		strings.Repeat("a", domain.MaxCodeBytes): true, strings.Repeat("a", domain.MaxCodeBytes+1): false,
	} {
		require.Equal(t, want, domain.ValidCode(code), "%q", code)
	}
}
