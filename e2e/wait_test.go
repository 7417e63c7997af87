package e2e

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// TestWaitForHealthy is KubeVela's "if the workflow step is unhealthy, the
// workflow step will be marked as wait but not failed and it will wait for
// healthy" on an http step whose target, a server of the test on
// 127.0.0.1, answers 503 (a declared wait code) for a while: the step is
// WAITING with the answer as its task's pending_reason, asks again after
// KubeVela's waiting backoff, and succeeds once the target answers 200,
// charged to no retry budget, each wait an event. With a wait_timeout
// shorter than the outage it FAILS with the code WaitTimeout.
func TestWaitForHealthy(t *testing.T) {
	t.Parallel()
	var recovering atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/recovering": // three 503s, then healthy
			if recovering.Add(1) <= 3 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		default: // an outage longer than any wait_timeout here
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	// The executor may reach loopback targets only when CAPSTAN_HTTP_ALLOW
	// lists them.
	s := Start(t, bins, Options{Executors: 1, ExecutorEnv: func(int) []string {
		return []string{"CAPSTAN_HTTP_ALLOW=127.0.0.1/8"}
	}})
	probe := func(path, waitTimeout string) api.WorkflowSpec {
		step := api.Step{Name: "probe", Plugin: ptr("http"),
			Http: &api.HTTPSpec{Url: srv.URL + path, WaitCodes: &[]int{503}}}
		if waitTimeout != "" {
			step.WaitTimeout = &waitTimeout
		}
		return api.WorkflowSpec{Steps: []api.Step{step}}
	}

	t.Run("succeeds once healthy, uncharged", func(t *testing.T) {
		t.Parallel()
		name := create(t, s, probe("/recovering", ""))
		s.Eventually(30*time.Second, "the step waits", func() bool {
			a := action(getRun(t, s, name), "probe")
			return a.Phase == api.PhaseWAITING && len(a.Tasks) == 1 && a.Tasks[0].PendingReason != nil &&
				strings.Contains(*a.Tasks[0].PendingReason, "503")
		})
		run := waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
		task := action(run, "probe").Tasks[0]
		require.Zero(t, task.FailureCount, "a wait is not a failure")
		require.Equal(t, []api.TaskState{api.TaskStateFAILED, api.TaskStateFAILED, api.TaskStateFAILED,
			api.TaskStateSUCCEEDED}, attemptStates(action(run, "probe"))[0])
		for _, at := range task.Attempts[:3] {
			require.Equal(t, "waiting", *at.Cause)
			require.Equal(t, "NotReady", *at.Code)
		}
		require.Equal(t, 3, countEvents(t, s, name, "task.SHOULD_WAIT"), "three waits recorded as events")
	})

	t.Run("fails past wait_timeout", func(t *testing.T) {
		t.Parallel()
		name := create(t, s, probe("/down", "2s"))
		run := waitPhase(t, s, name, 60*time.Second, api.PhaseFAILED)
		a := action(run, "probe")
		require.Equal(t, api.PhaseFAILED, a.Phase)
		require.NotNil(t, a.Reason)
		require.Equal(t, "WaitTimeout", *a.Reason)
		task := a.Tasks[0]
		require.Zero(t, task.FailureCount)
		last := task.Attempts[len(task.Attempts)-1]
		require.Equal(t, "WaitTimeout", *last.Code)
		require.GreaterOrEqual(t, len(task.Attempts), 2, "it waited before it gave up")
		require.Equal(t, len(task.Attempts)-1, countEvents(t, s, name, "task.SHOULD_WAIT"))
	})
}

// countEvents counts the run's run_events rows of type typ.
func countEvents(t *testing.T, s *Stack, run, typ string) int {
	t.Helper()
	db, err := sql.Open("pgx", s.DBURL)
	require.NoError(t, err)
	defer db.Close()
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(),
		`SELECT count(*) FROM run_events WHERE project = $1 AND domain = $2 AND run_name = $3 AND type = $4`,
		project, domain, run, typ).Scan(&n))
	return n
}
