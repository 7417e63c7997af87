package reconciler

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// An attempt kill (preemption) is delivered like an abort: counted in
// Postgres first, retried with backoff, cleared when the executor kills it;
// the executor hears the cause.
func TestKillDeliversAfterFailures(t *testing.T) {
	t.Parallel()
	const failures = 2
	h := newHarness(t, testConfig(), nil)
	exe := newFakeExecutor(t, failThenOK(failures))
	h.start()
	s := h.seedKill(exe.URL(), store.CausePreempted)
	id := s.attempts[0]
	require.NoError(t, h.pushKill(id))

	a := h.waitKillOutcome(s.key, id)
	require.Equal(t, store.AbortDelivered, *a.KillOutcome)
	require.Equal(t, failures+1, a.KillAttemptCount)
	require.Equal(t, domain.TaskRunning, a.State, "the executor reports the kill it made")
	calls := exe.Calls()
	require.Len(t, calls, failures+1)
	for _, c := range calls {
		require.Equal(t, id, c.AttemptID)
		require.Equal(t, store.CausePreempted, c.Cause)
		require.Equal(t, "attempt kill: preempted", c.Reason)
	}
	require.InDelta(t, 1, testutil.ToFloat64(h.rec.metrics.requested.WithLabelValues(kindAttempt)), 0)
	require.InDelta(t, failures, testutil.ToFloat64(h.rec.metrics.retried.WithLabelValues(kindAttempt)), 0)
	require.InDelta(t, 1, testutil.ToFloat64(h.rec.metrics.delivered.WithLabelValues(kindAttempt)), 0)
	require.Zero(t, testutil.ToFloat64(h.rec.metrics.delivered.WithLabelValues(kindAction)))
	h.waitQueueIdle()
}

func TestKillGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxAttempts = 3
	h := newHarness(t, cfg, nil)
	exe := newFakeExecutor(t, always(http.StatusInternalServerError))
	h.start()
	s := h.seedKill(exe.URL(), store.CauseTimeout)
	require.NoError(t, h.pushKill(s.attempts[0]))

	a := h.waitKillOutcome(s.key, s.attempts[0])
	require.Equal(t, store.AbortNeedsIntervention, *a.KillOutcome)
	require.Equal(t, cfg.MaxAttempts, a.KillAttemptCount)
	require.Len(t, exe.Calls(), cfg.MaxAttempts)
	recs, _, err := h.st.Aborts().ListAborts(h.ctx, store.AbortFilter{State: store.AbortStateNeedsIntervention})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, s.attempts[0], *recs[0].AttemptID)
	h.waitQueueIdle()
	_, err = h.insp.GetTaskInfo(cfg.Queue, queue.AttemptKillTaskID(s.attempts[0]))
	require.ErrorIs(t, err, asynq.ErrTaskNotFound, "done, not archived")
}

// An executor that no longer holds the attempt: one call, the attempt ends
// PREEMPTED with its cause, and since its task still counted on it the
// scheduler is asked to evaluate it.
func TestKillAlreadyGoneAsksForEvaluation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig(), nil)
	exe := newFakeExecutor(t, always(http.StatusNotFound))
	h.start()
	s := h.seedKill(exe.URL(), store.CausePreempted)
	id := s.attempts[0]
	require.NoError(t, h.pushKill(id))

	a := h.waitKillOutcome(s.key, id)
	require.Equal(t, store.AbortDelivered, *a.KillOutcome)
	require.Equal(t, 1, a.KillAttemptCount)
	require.Len(t, exe.Calls(), 1)
	require.Equal(t, domain.TaskPreempted, a.State)
	require.Equal(t, store.CausePreempted, *a.Cause)
	require.Nil(t, a.EvaluatedAt, "left to the scheduler")
	info, err := h.insp.GetTaskInfo(h.cfg.SchedulerQueue, "attempt:"+strconv.FormatInt(id, 10)+":evaluate")
	require.NoError(t, err)
	require.Equal(t, queue.TypeTaskEvaluate, info.Type)
}

// A kill whose attempt ended on its own, or whose worker is dead, calls no
// executor.
func TestKillWithoutCall(t *testing.T) {
	t.Parallel()
	for name, edit := range map[string]func(*harness, seeded){
		"attempt already ended": func(h *harness, s seeded) {
			exit := 0
			_, err := storetest.ReportAttempt(h.ctx, h.st, s.attempts[0], store.Report{State: domain.TaskSucceeded, ExitCode: &exit})
			require.NoError(h.t, err)
		},
		"worker dead": func(*harness, seeded) {},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			var now func() time.Time
			if name == "worker dead" {
				now = func() time.Time { return time.Now().Add(time.Hour) }
			}
			h := newHarness(t, cfg, func(d *Deps) { d.Now = now })
			exe := newFakeExecutor(t, always(http.StatusOK))
			h.start()
			s := h.seedKill(exe.URL(), store.CauseWorkerLost)
			edit(h, s)
			require.NoError(t, h.pushKill(s.attempts[0]))

			a := h.waitKillOutcome(s.key, s.attempts[0])
			require.Equal(t, store.AbortDelivered, *a.KillOutcome)
			require.Empty(t, exe.Calls())
			require.True(t, domain.TaskState(a.State).IsTerminal())
			require.InDelta(t, 1, testutil.ToFloat64(h.rec.metrics.alreadyTerminated.WithLabelValues(kindAttempt)), 0)
		})
	}
}

// The startup scan re-pushes pending kills as well as aborts.
func TestStartupScanDeliversKills(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig(), nil)
	exe := newFakeExecutor(t, always(http.StatusOK))
	s := h.seedKill(exe.URL(), store.CausePreempted)
	ab := h.seedAbort(exe.URL(), 1)
	h.start()

	require.Equal(t, store.AbortDelivered, *h.waitKillOutcome(s.key, s.attempts[0]).KillOutcome)
	require.Equal(t, store.AbortDelivered, *h.waitOutcome(ab.key).AbortOutcome)
	require.Len(t, exe.Calls(), 2)
	require.InDelta(t, 1, testutil.ToFloat64(h.rec.metrics.resyncEnqueued.WithLabelValues(kindAttempt, resultEnqueued)), 0)
}

func TestHandleBadKillPayloadSkipsRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig(), nil)
	for _, payload := range []string{`{`, `{"attempt_id":0}`, `{"attempt_id":"x"}`} {
		err := h.rec.HandleAttemptKill(t.Context(), asynq.NewTask(queue.TypeAttemptKill, []byte(payload)))
		require.ErrorIs(t, err, asynq.SkipRetry, payload)
	}
}
