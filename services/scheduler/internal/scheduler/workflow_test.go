package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// phaseOf returns an action's phase and row.
func (f *runFixture) action(t *testing.T, key domain.RunKey, name string) store.Action {
	t.Helper()
	d, err := f.st.Actions().GetAction(context.Background(), key.Action(name))
	require.NoError(t, err)
	return d.Action
}

func (f *runFixture) runPhase(t *testing.T, key domain.RunKey) domain.Phase {
	t.Helper()
	d, err := f.st.Runs().GetRun(context.Background(), key)
	require.NoError(t, err)
	return domain.Phase(d.Run.Phase)
}

// currentTask returns the id of task 0 of an action's current generation.
func (f *runFixture) currentTask(t *testing.T, key domain.RunKey, name string) int64 {
	t.Helper()
	gen := f.action(t, key, name).Generation
	for _, td := range f.tasks(t, key, name) {
		if td.Task.Generation == gen && td.Task.Idx == 0 {
			return td.Task.ID
		}
	}
	t.Fatalf("no task of generation %d in %s", gen, name)
	return 0
}

// A suspend step with a duration holds the run PAUSED, and the leader's
// pass resumes it once the duration passed (the wait lives in Postgres).
func TestSuspendDurationResumesByItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	key := f.newRun(t, "nap", domain.WorkflowSpec{Steps: []domain.Step{
		{Name: "nap", Kind: domain.KindSuspend, Duration: "50ms"}, {Name: "after", Command: "true"}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	nap := f.action(t, key, "nap")
	require.Equal(t, string(domain.PhasePaused), nap.Phase)
	require.Equal(t, store.WaitDuration, *nap.WaitingFor)
	require.Equal(t, domain.PhasePaused, f.runPhase(t, key))

	require.Eventually(t, func() bool {
		_, err := (expiry{f.s}).runOnce(ctx)
		require.NoError(t, err)
		return f.action(t, key, "nap").Phase == string(domain.PhaseSucceeded)
	}, 5*time.Second, 10*time.Millisecond)
	require.Len(t, f.tasks(t, key, "after"), 1, "the next step started")
	require.Equal(t, domain.PhaseRunning, f.runPhase(t, key))
}

// on_failure: suspend (KubeVela): a FAILED step is retried as a whole after
// the backoff, with a new generation of tasks; after the configured number
// of failed retries the step and the run are PAUSED with step_retries shown;
// a resume retries it with a fresh count and the run can succeed.
func TestOnFailureSuspendRetriesThenPauses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	f.s.cfg.Workflow = WorkflowConfig{MaxStepRetries: 2, FailedBackoffCap: time.Millisecond}
	w := f.register(t)
	key := f.newRun(t, "flaky", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "false",
		OnFailure: domain.OnFailureSuspend}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	for retry := 1; retry <= 2; retry++ {
		ev := f.runAttempt(t, w, f.currentTask(t, key, "s"), domain.TaskFailed, 1)
		require.Equal(t, domain.PhaseRunning, ev.ActionPhase, "waits for retry %d", retry)
		a := f.action(t, key, "s")
		require.Equal(t, retry, a.FailedTimes)
		require.Equal(t, store.WaitRetry, *a.WaitingFor)
		require.Eventually(t, func() bool {
			_, err := (expiry{f.s}).runOnce(ctx)
			require.NoError(t, err)
			return f.action(t, key, "s").Generation == retry
		}, 5*time.Second, 5*time.Millisecond)
	}
	ev := f.runAttempt(t, w, f.currentTask(t, key, "s"), domain.TaskFailed, 1)
	require.Equal(t, domain.PhasePaused, ev.ActionPhase)
	a := f.action(t, key, "s")
	require.Equal(t, 3, a.FailedTimes, "step_retries")
	require.Equal(t, domain.PhasePaused, f.runPhase(t, key))
	require.Len(t, f.tasks(t, key, "s"), 3, "every generation's task is kept")

	f.resume(t, key)
	_, err = f.s.advance(ctx, key)
	require.NoError(t, err)
	a = f.action(t, key, "s")
	require.Equal(t, 3, a.Generation)
	require.Zero(t, a.FailedTimes, "a resume retries with a fresh count")
	ev = f.runAttempt(t, w, f.currentTask(t, key, "s"), domain.TaskSucceeded, 0)
	require.Equal(t, domain.PhaseSucceeded, ev.ActionPhase)
	require.Equal(t, domain.PhaseSucceeded, f.runPhase(t, key))
}

// A restart of a failed run from its failed step runs that step and the one
// after it again, under their next generation, keeps the first step, and
// reopens the run.
func TestRestartFromAFailedStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	w := f.register(t)
	key := f.newRun(t, "three", domain.WorkflowSpec{Steps: []domain.Step{{Name: "one", Command: "true"},
		{Name: "two", Command: "x"}, {Name: "three", Command: "true"}}})
	_, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	f.runAttempt(t, w, f.currentTask(t, key, "one"), domain.TaskSucceeded, 0)
	f.runAttempt(t, w, f.currentTask(t, key, "two"), domain.TaskFailed, 1)
	require.Equal(t, domain.PhaseFailed, f.runPhase(t, key))
	require.Equal(t, string(domain.PhaseSkipped), f.action(t, key, "three").Phase)

	_, err = f.db.Exec(`UPDATE runs SET restart_requested_at = now(), restart_from = 'two' WHERE name = 'three'`)
	require.NoError(t, err)
	adv, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	require.Equal(t, []string{"two"}, adv.Started)
	require.Equal(t, domain.PhaseRunning, f.runPhase(t, key))
	require.Equal(t, 0, f.action(t, key, "one").Generation, "the SUCCEEDED step is kept")
	require.Equal(t, 1, f.action(t, key, "two").Generation)
	f.runAttempt(t, w, f.currentTask(t, key, "two"), domain.TaskSucceeded, 0)
	f.runAttempt(t, w, f.currentTask(t, key, "three"), domain.TaskSucceeded, 0)
	require.Equal(t, domain.PhaseSucceeded, f.runPhase(t, key))
	require.Len(t, f.tasks(t, key, "two"), 2, "the failed attempt stays in the history")
	require.Len(t, f.tasks(t, key, "one"), 1)
}

// A rejected approval fails its step with reason rejected; an approved one
// lets the run go on.
func TestApprovalDecides(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	for _, tc := range []struct {
		run, decision string
		want          domain.Phase
	}{{"yes", domain.DecisionApproved, domain.PhaseSucceeded}, {"no", domain.DecisionRejected, domain.PhaseFailed}} {
		key := f.newRun(t, tc.run, domain.WorkflowSpec{Steps: []domain.Step{{Name: "ok", Kind: domain.KindApproval}}})
		_, err := f.s.advance(ctx, key)
		require.NoError(t, err)
		require.Equal(t, domain.PhasePaused, f.runPhase(t, key))
		_, err = f.db.Exec(`UPDATE actions SET decision = $1, decided_by = 'ann', decided_at = now()
			WHERE run_name = $2 AND name = 'ok'`, tc.decision, tc.run)
		require.NoError(t, err)
		_, err = f.s.advance(ctx, key)
		require.NoError(t, err)
		require.Equal(t, tc.want, f.runPhase(t, key), tc.run)
		if tc.decision == domain.DecisionRejected {
			require.Equal(t, domain.DecisionRejected, *f.action(t, key, "ok").Reason)
		}
	}
}

// resume records a resume of the run, as the api does.
func (f *runFixture) resume(t *testing.T, key domain.RunKey) {
	t.Helper()
	_, err := f.db.Exec(`UPDATE runs SET suspend_requested_at = NULL, resume_requested_at = now() + interval '1 millisecond'
		WHERE project = $1 AND domain = $2 AND name = $3`, key.Project, key.Domain, key.Run)
	require.NoError(t, err)
}

// A step's timeout counts from its first start, retries included, and a
// run's from its creation: past either, the expiry pass aborts it with cause
// timeout (TIMED_OUT).
func TestStepAndRunTimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	step := f.newRun(t, "step-timeout", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "sleep 600",
		Timeout: "50ms", MaxRetriesFailure: iptr(5)}}})
	run := f.newRun(t, "run-timeout", domain.WorkflowSpec{Timeout: "50ms", Steps: []domain.Step{{Name: "s", Command: "sleep 600"}}})
	for _, key := range []domain.RunKey{step, run} {
		_, err := f.s.advance(ctx, key)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		_, err := (expiry{f.s}).runOnce(ctx)
		require.NoError(t, err)
		return f.runPhase(t, step) == domain.PhaseTimedOut && f.runPhase(t, run) == domain.PhaseTimedOut
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, string(domain.PhaseTimedOut), f.action(t, step, "s").Phase)
	require.Equal(t, string(domain.PhaseTimedOut), f.action(t, run, "s").Phase)
	require.Equal(t, domain.TaskKilled, f.tasks(t, run, "s")[0].Task.State)
}

// A condition that exceeds its cost limit fails its step without running
// it (FAILED, its reason naming the limit), and the run fails: the advance
// returns, having held the run's lock for a bounded time.
func TestConditionOverItsLimitFailsTheStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	spec := domain.WorkflowSpec{Params: []domain.Param{{Name: "s"}}, Steps: []domain.Step{
		{Name: "heavy", Command: "true", If: `params.s.contains("zzz")`}, {Name: "after", Command: "true"}}}
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	key := domain.RunKey{Project: "p", Domain: "d", Run: "heavy"}
	_, _, err := f.st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec,
		Params: map[string]any{"s": strings.Repeat("a", 2<<20)}})
	require.NoError(t, err)
	_, err = f.s.advance(ctx, key)
	require.NoError(t, err)
	heavy := f.action(t, key, "heavy")
	require.Equal(t, string(domain.PhaseFailed), heavy.Phase)
	require.Equal(t, "its condition failed: expression limit exceeded: it cost more than 100000 units", *heavy.Reason)
	require.Empty(t, f.tasks(t, key, "heavy"), "nothing ran")
	require.Equal(t, string(domain.PhaseSkipped), f.action(t, key, "after").Phase)
	require.Equal(t, domain.PhaseFailed, f.runPhase(t, key))
}

// The advance that holds a run's lock evaluates no condition: one that
// would fail at its cost limit leaves its step undecided (QUEUED), and the
// advance leaves it for after its commit (judge). The whole advance then
// evaluates it outside the transaction and decides from its verdict in a
// second one: FAILED, with the limit as its reason. Only a run whose steps
// kept changing under it, maxJudgeRounds advances in a row, evaluates
// under the lock.
func TestConditionsAreEvaluatedOutsideTheRunLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	spec := domain.WorkflowSpec{Params: []domain.Param{{Name: "s"}}, Steps: []domain.Step{
		{Name: "heavy", Command: "true", If: `params.s.contains("zzz")`}, {Name: "after", Command: "true"}}}
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	key := domain.RunKey{Project: "p", Domain: "d", Run: "judged"}
	_, _, err := f.st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec,
		Params: map[string]any{"s": strings.Repeat("a", 2<<20)}})
	require.NoError(t, err)

	var locked Advance
	var run store.Run
	require.NoError(t, f.st.InTx(ctx, func(tx *store.Store) error {
		if run, err = tx.Runs().LockRun(ctx, key); err != nil {
			return err
		}
		locked, err = f.s.progress(ctx, tx, run, time.Now())
		return err
	}))
	require.NotNil(t, locked.judge, "the condition is left for after the commit")
	require.Empty(t, locked.Started)
	require.Equal(t, string(domain.PhaseQueued), f.action(t, key, "heavy").Phase, "not evaluated under the lock")

	status := map[string]domain.StepStatus{"heavy": {Phase: domain.PhaseQueued}, "after": {Phase: domain.PhaseQueued}}
	require.Equal(t, []string{"heavy"}, judging{round: maxJudgeRounds - 1}.evaluate(run, status).Unjudged)
	require.Equal(t, []string{"heavy"}, judging{round: maxJudgeRounds}.evaluate(run, status).Fail,
		"the last round evaluates under the lock")

	adv, err := f.s.advance(ctx, key)
	require.NoError(t, err)
	require.Nil(t, adv.judge)
	require.Equal(t, domain.PhaseFailed, adv.Phase, "the advance returns what its judged advance did")
	heavy := f.action(t, key, "heavy")
	require.Equal(t, string(domain.PhaseFailed), heavy.Phase)
	require.Equal(t, "its condition failed: expression limit exceeded: it cost more than 100000 units", *heavy.Reason)
	require.Equal(t, string(domain.PhaseSkipped), f.action(t, key, "after").Phase)
}
