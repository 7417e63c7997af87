package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// fakeClock is an injected Config.Now that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// kubeVelaFirstTen is KubeVela's "the first ten backoff time will be like"
// table: int(0.05·2^(n-1)) s, at least 1 s.
var kubeVelaFirstTen = []time.Duration{time.Second, time.Second, time.Second, time.Second, time.Second, time.Second,
	3 * time.Second, 6 * time.Second, 12 * time.Second, 25 * time.Second}

// reportNotReady is an executor's report of a waiting attempt: the http
// plugin got one of its step's wait codes.
var reportNotReady = store.Report{State: domain.TaskFailed, Cause: domain.CauseWaiting, Code: "NotReady",
	Error: "GET http://svc/healthz: status 503 Service Unavailable (a wait code: not ready yet)"}

// probeSpec is one http step that waits while its target answers 503.
func probeSpec(waitTimeout string) domain.WorkflowSpec {
	return domain.WorkflowSpec{Steps: []domain.Step{{Name: "probe", Plugin: domain.PluginHTTP, WaitTimeout: waitTimeout,
		HTTP: &domain.HTTPSpec{URL: "http://svc/healthz", WaitCodes: []int{503}}}}}
}

// KubeVela: "if the workflow step is unhealthy, the workflow step will be
// marked as wait but not failed and it will wait for healthy", retried
// after its backoff (the first ten as its table, with the real 60 s cap).
// Each wait is WAITING with the answer as pending_reason, charges no
// budget, and is an event; the next check's placement makes the step
// RUNNING again, and its success ends the run of waits.
func TestWaitingStepIsRetriedWithKubeVelasWaitBackoffUncharged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	clock := newFakeClock()
	f.s.cfg.Now = clock.Now
	w := f.register(t)
	key := f.newRun(t, "probe", probeSpec(""))
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	for i, delay := range kubeVelaFirstTen {
		id := f.currentTask(t, key, "probe")
		a := f.attemptIn(t, w, id, reportRunning, reportNotReady)
		require.Equal(t, string(domain.PhaseRunning), f.action(t, key, "probe").Phase, "wait %d: the check runs", i+1)
		ev, err := f.s.evaluate(ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, domain.ShouldWait, ev.Result, "wait %d", i+1)
		require.Equal(t, domain.PhaseWaiting, ev.ActionPhase, "wait %d", i+1)
		require.WithinDuration(t, clock.Now().Add(delay), *ev.NotBefore, 0, "wait %d: KubeVela's delay %s", i+1, delay)
		td := f.tasks(t, key, "probe")[0]
		require.Equal(t, domain.TaskPending, td.Task.State)
		require.Zero(t, td.Task.FailureCount, "never charged to max_retries_failure")
		require.Zero(t, td.Task.SystemFailureCount)
		require.Equal(t, i+1, td.Task.WaitCount)
		require.Contains(t, *td.Task.PendingReason, "status 503")
		require.Equal(t, string(domain.PhaseWaiting), f.action(t, key, "probe").Phase)
		require.Equal(t, domain.PhaseRunning, f.runPhase(t, key), "the run runs on")
		clock.advance(delay)
	}
	require.Equal(t, len(kubeVelaFirstTen), f.events(t, "task.SHOULD_WAIT", 0), "each wait is an event")

	ev := f.runAttempt(t, w, f.currentTask(t, key, "probe"), domain.TaskSucceeded, 0)
	require.Equal(t, domain.PhaseSucceeded, ev.ActionPhase)
	td := f.tasks(t, key, "probe")[0]
	require.Zero(t, td.Task.WaitCount, "another answer ends the run of waits")
	require.Nil(t, td.Task.WaitingSince)
	require.Zero(t, td.Task.FailureCount)
	require.Equal(t, domain.PhaseSucceeded, f.runPhase(t, key))
}

// wait_timeout bounds a run of waits from its first: the last check falls
// at the deadline, and a wait answered there FAILS the step with code
// WaitTimeout (its reason, and the attempt's code).
func TestWaitTimeoutFailsTheStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	clock := newFakeClock()
	f.s.cfg.Now = clock.Now
	w := f.register(t)
	key := f.newRun(t, "probe", probeSpec("2500ms"))
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	start := clock.Now()
	for _, due := range []time.Duration{time.Second, 2 * time.Second, 2500 * time.Millisecond} {
		a := f.attemptIn(t, w, f.currentTask(t, key, "probe"), reportRunning, reportNotReady)
		ev, err := f.s.evaluate(ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, domain.ShouldWait, ev.Result)
		require.WithinDuration(t, start.Add(due), *ev.NotBefore, 0, "the last check is moved up to the deadline")
		clock.advance(start.Add(due).Sub(clock.Now()))
	}
	a := f.attemptIn(t, w, f.currentTask(t, key, "probe"), reportRunning, reportNotReady)
	ev, err := f.s.evaluate(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, domain.ExceededRetryLimit, ev.Result)
	require.Equal(t, domain.PhaseFailed, ev.ActionPhase)
	act := f.action(t, key, "probe")
	require.Equal(t, domain.CodeWaitTimeout, *act.Reason)
	require.Equal(t, domain.CodeWaitTimeout, *f.attempt(t, a.ID).Code)
	td := f.tasks(t, key, "probe")[0]
	require.Equal(t, domain.TaskFailed, td.Task.State)
	require.Zero(t, td.Task.FailureCount, "a wait timeout charges no budget either")
	require.Equal(t, domain.PhaseFailed, f.runPhase(t, key))
}

// KubeVela's step retry (on_failure: suspend) as applied, not as computed:
// with the real 300 s cap, each failed retry waits int(0.05·2^(n-1)) s, at
// least 1 s, from its failure (the first ten as KubeVela's table), and
// after the tenth (CAPSTAN_WORKFLOW_MAX_STEP_RETRIES) the step is PAUSED.
func TestKubeVelaStepRetryDelaysAsApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	clock := newFakeClock()
	f.s.cfg.Now = clock.Now
	require.Equal(t, domain.KubeVelaFailedCap, f.s.cfg.Workflow.FailedBackoffCap)
	require.Equal(t, domain.KubeVelaMaxRetries, f.s.cfg.Workflow.MaxStepRetries)
	w := f.register(t)
	key := f.newRun(t, "flaky", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "false",
		OnFailure: domain.OnFailureSuspend}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	for n, delay := range kubeVelaFirstTen {
		f.runAttempt(t, w, f.currentTask(t, key, "s"), domain.TaskFailed, 1)
		a := f.action(t, key, "s")
		require.Equal(t, store.WaitRetry, *a.WaitingFor, "failed retry %d", n+1)
		require.WithinDuration(t, clock.Now().Add(delay), *a.NotBefore, 0, "failed retry %d waits %s", n+1, delay)
		clock.advance(delay - time.Millisecond)
		_, err := f.s.advance(ctx, key)
		require.NoError(t, err)
		require.Equal(t, n, f.action(t, key, "s").Generation, "not retried before its backoff ended")
		clock.advance(time.Millisecond)
		_, err = f.s.advance(ctx, key)
		require.NoError(t, err)
		require.Equal(t, n+1, f.action(t, key, "s").Generation, "retried once its backoff ended")
	}
	ev := f.runAttempt(t, w, f.currentTask(t, key, "s"), domain.TaskFailed, 1)
	require.Equal(t, domain.PhasePaused, ev.ActionPhase, "after 10 failed retries the workflow suspends")
}

// Iris: "When a job exceeds max_task_failures, _finalize_job_state calls
// _mark_remaining_tasks_killed to terminate all surviving tasks": a job
// that is no gang, whose one FAILED task exceeds max_task_failures 0,
// kills its PENDING and running tasks, and asks the reconciler to stop the
// live attempt.
func TestJobFailureKillsRemainingTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "job", domain.WorkflowSpec{Steps: []domain.Step{{Name: "j", Command: "true", Replicas: iptr(3)}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	tasks := f.tasks(t, key, "j")
	running := f.attemptIn(t, w, tasks[1].Task.ID, reportRunning)
	ev := f.runAttempt(t, w, tasks[0].Task.ID, domain.TaskFailed, 1)
	require.Equal(t, domain.ExceededRetryLimit, ev.Result)
	require.Equal(t, domain.PhaseFailed, ev.ActionPhase, "FAILED count 1 > max_task_failures 0")
	require.NotNil(t, ev.AbortSurvivors, "the running survivor's process must be stopped")
	got := f.tasks(t, key, "j")
	require.Equal(t, domain.TaskFailed, got[0].Task.State)
	require.Equal(t, domain.TaskKilled, got[1].Task.State, "the running task is killed, not exhausted (no gang)")
	require.Equal(t, domain.TaskKilled, got[2].Task.State, "the PENDING task is killed")
	require.NotNil(t, f.action(t, key, "j").AbortRequestedAt)
	live, err := f.st.Aborts().LiveAttemptsUnder(ctx, key.Action("j"))
	require.NoError(t, err)
	require.Len(t, live, 1)
	require.Equal(t, running.ID, live[0].ID)
}

// CAPSTAN_WORKFLOW_ON_FAILURE is the operator's default for the steps that
// do not say: suspend makes such a step KubeVela's retry-then-suspend,
// while a step that says on_failure: fail still fails the run.
func TestOnFailureDefaultIsTheOperators(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	require.Equal(t, domain.OnFailureFail, f.s.cfg.Workflow.OnFailure, "default fail")
	f.s.cfg.Workflow.OnFailure = domain.OnFailureSuspend
	w := f.register(t)
	silent := f.newRun(t, "silent", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "false"}}})
	explicit := f.newRun(t, "explicit", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "false",
		OnFailure: domain.OnFailureFail}}})
	for _, key := range []domain.RunKey{silent, explicit} {
		_, err := f.s.advance(ctx, key)
		require.NoError(t, err)
		f.runAttempt(t, w, f.currentTask(t, key, "s"), domain.TaskFailed, 1)
	}
	a := f.action(t, silent, "s")
	require.Equal(t, string(domain.PhaseRunning), a.Phase, "retried after its backoff")
	require.Equal(t, store.WaitRetry, *a.WaitingFor)
	require.Equal(t, domain.PhaseFailed, f.runPhase(t, explicit), "its own on_failure wins")
}

// A plugin its executor lacks (PluginUnavailable) is never charged to the
// worker (the attempt was placed where it cannot run); it is retried as a
// system failure while another alive worker runs the plugin, and fails the
// task for good (permanent) when none does.
func TestPluginUnavailableIsPermanentWhenNoWorkerOffersIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	unavailable := store.Report{State: domain.TaskFailed, Cause: domain.CauseSystem, Code: domain.CodePluginUnavailable,
		Error: "this executor does not run the container plugin"}
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "c", Plugin: domain.PluginContainer,
		Container: &domain.ContainerSpec{Image: "alpine:3"}}}}

	other, err := f.st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "docker", Address: "http://127.0.0.1:2",
		Slots: 1, Labels: map[string]string{domain.PluginLabel(domain.PluginContainer): "true"}})
	require.NoError(t, err)
	offered := f.newRun(t, "offered", spec)
	_, err = f.s.advance(ctx, offered)
	require.NoError(t, err)
	a := f.attemptIn(t, w, f.currentTask(t, offered, "c"), reportBuilding, unavailable)
	ev, err := f.s.evaluate(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, domain.ShouldRetry, ev.Result, "another worker runs it: placement may find it one")
	require.Equal(t, 1, f.tasks(t, offered, "c")[0].Task.SystemFailureCount)

	require.NoError(t, f.st.Workers().DeleteWorker(ctx, other.ID))
	alone := f.newRun(t, "alone", spec)
	_, err = f.s.advance(ctx, alone)
	require.NoError(t, err)
	a = f.attemptIn(t, w, f.currentTask(t, alone, "c"), reportBuilding, unavailable)
	ev, err = f.s.evaluate(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, domain.ExceededRetryLimit, ev.Result, "no alive worker runs it: it can never be placed")
	require.Equal(t, domain.CodePluginUnavailable, ev.Code)
	require.Equal(t, domain.PhaseFailed, f.runPhase(t, alone))
	td := f.tasks(t, alone, "c")[0]
	require.Zero(t, td.Task.SystemFailureCount, "permanent: charged to no budget")

	row, ok := f.worker(t, w.ID)
	require.True(t, ok, "the worker that lacks the plugin is kept")
	require.Empty(t, row.Failures, "never charged to the worker (ARC's failures)")
	require.True(t, f.placeable(t, w.ID))
}
