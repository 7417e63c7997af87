package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// KubeVela: "if the workflow step is unhealthy, the workflow step will be
// marked as wait but not failed and it will wait for healthy": a waiting
// attempt charges no budget.
func TestWaitingAttemptChargesNothing(t *testing.T) {
	t.Parallel()
	b := domain.Budget{FailureCount: 1, MaxRetriesFailure: 1, MaxRetriesPreemption: 100, SystemFailureCount: 3,
		MaxSystemFailures: 3}
	for range 20 {
		out, r := domain.HandleAttemptResult(b, domain.AttemptOutcome{State: domain.TaskFailed, Waiting: true})
		require.Equal(t, domain.ShouldWait, r, "marked as wait but not failed")
		require.Equal(t, b, out, "no counter is charged, however many waits")
	}
	out, r := domain.HandleAttemptResult(b, domain.AttemptOutcome{State: domain.TaskFailed, Waiting: true, Started: true})
	require.Equal(t, domain.ShouldWait, r)
	require.Zero(t, out.SystemFailureCount, "a wait that ran progressed: the plugin and platform worked")
	require.Equal(t, "SHOULD_WAIT", domain.ShouldWait.String())
}

// The delays a waiting task is given are KubeVela's, "the first ten backoff
// time will be like" its table, and capped at 60 s while waiting.
func TestDecideWaitFollowsKubeVelaWaitingBackoff(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	start := now
	var w domain.Wait
	for _, row := range kubeVelaFirstTen {
		next, r, notBefore := domain.DecideWait(w, domain.WaitPolicy{}, now)
		require.Equal(t, domain.ShouldWait, r, "KubeVela row %s", row.row)
		require.Equal(t, row.want, notBefore.Sub(now), "KubeVela row %s", row.row)
		require.Equal(t, row.n, next.Count)
		require.Equal(t, start, *next.Since, "the run of waits keeps its first time")
		w, now = next, notBefore
	}
	for n := 11; n <= 14; n++ {
		next, _, notBefore := domain.DecideWait(w, domain.WaitPolicy{}, now)
		require.Equal(t, min(domain.KubeVela{Cap: time.Hour}.Delay(n), domain.KubeVelaWaitCap), notBefore.Sub(now),
			"wait %d: at most 60 s while waiting (--max-workflow-wait-backoff-time)", n)
		w, now = next, notBefore
	}
	_, _, notBefore := domain.DecideWait(domain.Wait{Count: 12, Since: &start}, domain.WaitPolicy{Cap: 5 * sec}, now)
	require.Equal(t, 5*sec, notBefore.Sub(now), "the cap is the operator's")
}

// wait_timeout (Capstan's) bounds a run of waits from its first: the last
// check falls at the deadline, and a wait answered at or past it fails the
// task with WaitTimeout.
func TestDecideWaitTimeout(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	p := domain.WaitPolicy{Timeout: 2500 * time.Millisecond}
	w, r, nb := domain.DecideWait(domain.Wait{}, p, t0)
	require.Equal(t, domain.ShouldWait, r)
	require.Equal(t, t0.Add(sec), nb)
	w, r, nb = domain.DecideWait(w, p, t0.Add(2*sec))
	require.Equal(t, domain.ShouldWait, r)
	require.Equal(t, t0.Add(p.Timeout), nb, "the next check is moved up to the deadline, not past it")
	got, r, _ := domain.DecideWait(w, p, t0.Add(p.Timeout))
	require.Equal(t, domain.ExceededRetryLimit, r, "a wait answered at the deadline ends the task")
	require.Equal(t, w, got)

	_, r, _ = domain.DecideWait(domain.Wait{}, domain.WaitPolicy{}, t0.Add(1000*time.Hour))
	require.Equal(t, domain.ShouldWait, r, "no wait_timeout: waits as long as the step may run")
	stale := t0.Add(-time.Hour)
	w, r, _ = domain.DecideWait(domain.Wait{Since: &stale}, p, t0)
	require.Equal(t, domain.ShouldWait, r, "a Since without a count is no run of waits")
	require.Equal(t, t0, *w.Since)
}

// A step declares what "not ready" is: http wait_codes, or a shell step's
// wait_exit_code; wait_timeout bounds it.
func TestWaitFieldsValidate(t *testing.T) {
	t.Parallel()
	step := func(edit func(*domain.Step)) domain.Step {
		s := domain.Step{Name: "probe", Plugin: domain.PluginHTTP, HTTP: &domain.HTTPSpec{URL: "http://svc/healthz",
			WaitCodes: []int{503, 425}}, WaitTimeout: "5m"}
		edit(&s)
		return s
	}
	code := func(n int) *int { return &n }
	tests := []struct {
		name  string
		s     domain.Step
		field string
	}{
		{"http wait codes with a timeout", step(func(*domain.Step) {}), ""},
		{"a wait code out of range", step(func(s *domain.Step) { s.HTTP.WaitCodes = []int{99} }), ".steps[0].http.wait_codes[0]"},
		{"a wait code that is a success code (2xx by default)", step(func(s *domain.Step) { s.HTTP.WaitCodes = []int{202} }),
			".steps[0].http.wait_codes[0]"},
		{"a wait code that is a declared success code",
			step(func(s *domain.Step) { s.HTTP.SuccessCodes, s.HTTP.WaitCodes = []int{503}, []int{503} }), ".steps[0].http.wait_codes[0]"},
		{"a 2xx wait code when the success codes are others",
			step(func(s *domain.Step) { s.HTTP.SuccessCodes, s.HTTP.WaitCodes = []int{200}, []int{202} }), ""},
		{"too many wait codes", step(func(s *domain.Step) { s.HTTP.WaitCodes = make([]int, domain.MaxWaitCodes+1) }),
			".steps[0].http.wait_codes"},
		{"a wait_timeout that is no duration", step(func(s *domain.Step) { s.WaitTimeout = "soon" }), ".steps[0].wait_timeout"},
		{"a wait_timeout without anything to wait on", step(func(s *domain.Step) { s.HTTP.WaitCodes = nil }),
			".steps[0].wait_timeout"},
		{"a shell wait exit code", step(func(s *domain.Step) {
			s.Plugin, s.HTTP, s.Command, s.WaitExitCode = domain.PluginShell, nil, "pg_isready", code(75)
		}), ""},
		{"a shell wait exit code of 0 would wait on success", step(func(s *domain.Step) {
			s.Plugin, s.HTTP, s.Command, s.WaitExitCode = domain.PluginShell, nil, "true", code(0)
		}), ".steps[0].wait_exit_code"},
		{"a wait exit code beyond 255", step(func(s *domain.Step) {
			s.Plugin, s.HTTP, s.Command, s.WaitExitCode = domain.PluginShell, nil, "true", code(256)
		}), ".steps[0].wait_exit_code"},
		{"the http plugin takes no wait exit code", step(func(s *domain.Step) { s.WaitExitCode = code(75) }),
			".steps[0].wait_exit_code"},
		{"a suspend step waits on nothing", domain.Step{Name: "nap", Kind: domain.KindSuspend, WaitTimeout: "1m"},
			".steps[0].wait_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := domain.WorkflowSpec{Steps: []domain.Step{tc.s}}
			spec.Normalize()
			errs := spec.Validate("")
			if tc.field == "" {
				require.Empty(t, errs)
				return
			}
			require.NotEmpty(t, errs)
			require.Equal(t, tc.field, errs[0].Field, "%v", errs)
		})
	}
}

// A worker that lacks a plugin is not failing: its attempt was placed where
// it cannot run, so ARC's failures do not count it.
func TestPluginUnavailableIsNoPlatformFailure(t *testing.T) {
	t.Parallel()
	require.True(t, domain.IsPlatformFailure(domain.TaskFailed, domain.CauseSystem, "WorkDirFailed"))
	require.True(t, domain.IsPlatformFailure(domain.TaskWorkerFailed, domain.CauseWorkerLost, ""))
	require.False(t, domain.IsPlatformFailure(domain.TaskFailed, domain.CauseSystem, domain.CodePluginUnavailable))
	require.False(t, domain.IsPlatformFailure(domain.TaskFailed, domain.CauseWaiting, ""))
	require.False(t, domain.IsPlatformFailure(domain.TaskFailed, domain.CauseUser, ""))
}
