package e2e

import (
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	dom "github.com/capstan-run/capstan/pkg/domain"
	"github.com/stretchr/testify/require"
)

// TestWorkflowFaults: waits and retry backoffs live in Postgres, so a
// scheduler killed during a timed suspend, or a wiped Redis while a 10-step
// DAG waits on a suspend and a retry, loses nothing. One stack, the two
// scenarios in turn (each fault would disturb the other).
func TestWorkflowFaults(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Env: workflowEnv})

	t.Run("SuspendSurvivesSchedulerKill", func(t *testing.T) { testSuspendSurvivesSchedulerKill(t, s) })
	t.Run("FlushRedisMidDAG", func(t *testing.T) { testFlushRedisMidDAG(t, s) })
}

// testSuspendSurvivesSchedulerKill: a suspend step with duration 3s resumes
// by itself although the scheduler is killed (kill -9) and restarted during
// the wait, and not before the 3 s are over.
func testSuspendSurvivesSchedulerKill(t *testing.T, s *Stack) {
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{
		{Name: "before", Command: ptr("echo before")},
		{Name: "pause", Kind: ptr("suspend"), Duration: ptr("3s")},
		{Name: "after", Command: ptr("echo after")},
	}})
	run := waitRun(t, s, name, 30*time.Second, "pause waiting 3s", func(r *api.Run) bool {
		p := action(r, "pause")
		return p.Phase == api.PhasePAUSED && p.WaitingFor != nil && *p.WaitingFor == "duration" && p.NotBefore != nil
	})
	due := *action(run, "pause").NotBefore
	s.Kill("scheduler")
	s.StartService("scheduler")
	require.True(t, time.Now().Before(due), "the scheduler was back before the wait ended (due %s)", due)
	t.Logf("scheduler killed and restarted %s before the wait's end", time.Until(due).Round(time.Millisecond))

	run = waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
	pause, after := action(run, "pause"), action(run, "after")
	require.Equal(t, api.PhaseSUCCEEDED, pause.Phase)
	require.False(t, pause.EndedAt.Before(due), "the wait ended %s, before its end %s", pause.EndedAt, due)
	require.False(t, after.StartedAt.Before(due), "after started before the wait's end")
	require.Equal(t, map[int][]api.TaskState{0: {api.TaskStateSUCCEEDED}}, attemptStates(after))
	t.Logf("wait due %s; ended %s later; after started %s later", due.Format(time.TimeOnly),
		pause.EndedAt.Sub(due).Round(time.Millisecond), after.StartedAt.Sub(due).Round(time.Millisecond))
}

// testFlushRedisMidDAG: Redis is wiped (FLUSHDB of the stack's database)
// while a 10-step DAG has a suspend waiting its duration and a step waiting
// its retry backoff (on_failure: suspend, fails once); the run still
// SUCCEEDS and no task has two SUCCEEDED attempts.
func testFlushRedisMidDAG(t *testing.T, s *Stack) {
	dep := func(names ...string) *[]string { return &names }
	name := create(t, s, api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "s1", Command: ptr("echo s1")},
		{Name: "s2", DependsOn: dep("s1"), Command: ptr("sleep 1; echo s2")},
		{Name: "s3", DependsOn: dep("s1"), Command: ptr("echo s3"), Replicas: ptr(2)},
		{Name: "s4", DependsOn: dep("s1"), Command: ptr("sleep 1; echo s4")},
		{Name: "pause", DependsOn: dep("s1"), Kind: ptr("suspend"), Duration: ptr("3s")},
		{Name: "flaky", DependsOn: dep("s1"), OnFailure: ptr("suspend"), Command: failsOnce("flaky-tried")},
		{Name: "s7", DependsOn: dep("pause", "s2"), Command: ptr("echo s7")},
		{Name: "s8", DependsOn: dep("flaky", "s3"), Command: ptr("echo s8")},
		{Name: "s9", DependsOn: dep("s4", "s7"), Command: ptr("echo s9")},
		{Name: "final", DependsOn: dep("s8", "s9"), Command: ptr("echo final")},
	}})
	waitRun(t, s, name, 30*time.Second, "pause and flaky both waiting", func(r *api.Run) bool {
		require.Nil(t, r.EndedAt, "run ended %s", r.Phase)
		p, f := action(r, "pause"), action(r, "flaky")
		return p.WaitingFor != nil && *p.WaitingFor == "duration" && f.WaitingFor != nil && *f.WaitingFor == "retry"
	})
	s.FlushRedis()
	t.Log("flushed redis with pause waiting its duration and flaky its retry backoff")

	run := waitPhase(t, s, name, 45*time.Second, api.PhaseSUCCEEDED)
	require.Len(t, run.Actions, 11, "a0 and the 10 steps")
	for _, a := range run.Actions {
		require.Equal(t, api.PhaseSUCCEEDED, a.Phase, a.Name)
	}
	flaky := action(run, "flaky")
	require.Equal(t, map[int][]api.TaskState{0: {api.TaskStateFAILED}, 1: {api.TaskStateSUCCEEDED}}, attemptStates(flaky))
	require.Equal(t, 1, *flaky.StepRetries)
	require.Empty(t, succeededTwice(run), "no task has two SUCCEEDED attempts")

	var twice int
	require.NoError(t, openDB(t, s).QueryRow(`SELECT count(*) FROM (SELECT task_id FROM attempts WHERE state = $1
		GROUP BY task_id HAVING count(*) > 1) x`, int16(dom.TaskSucceeded)).Scan(&twice))
	require.Zero(t, twice, "no task succeeded twice (Postgres)")
}
