package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

func TestStepTasks(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	n, failures, preemptions, system := 3, 2, 7, 5
	full := domain.Step{Name: "s", Command: "true", Plugin: "shell", Replicas: &n, MaxRetriesFailure: &failures,
		MaxRetriesPreemption: &preemptions, MaxSystemFailures: &system, Priority: "production",
		Resources:   &domain.Resources{CPUMillis: 500, MemoryBytes: 1 << 20},
		Constraints: []domain.Constraint{{Key: "zone", Op: "EQ", Value: "a"}}, Coscheduled: true,
		AttemptTimeout: "90s", SchedulingTimeout: "1m"}
	deadline := now.Add(time.Minute)
	cases := []struct {
		rule     string // the rule, quoted from Iris and the design
		step     domain.Step
		defaults int
		want     domain.NewTask // every replica's, Idx aside
		replicas int
	}{
		{"Iris: a job expands into replicas tasks, each PENDING, with the default budgets " +
			"(max_retries_failure 0, max_retries_preemption 100), band interactive, and max_system_failures the scheduler's",
			domain.Step{Name: "s", Command: "true"}, 4,
			domain.NewTask{State: domain.TaskPending, MaxRetriesFailure: 0, MaxRetriesPreemption: 100,
				MaxSystemFailures: 4, Priority: domain.PriorityInteractive, Constraints: []domain.Constraint{}}, 1},
		{"each task carries the step's retry limits and scheduling fields, so that placement reads tasks only",
			full, 4, domain.NewTask{State: domain.TaskPending, MaxRetriesFailure: 2, MaxRetriesPreemption: 7,
				MaxSystemFailures: 5, Priority: domain.PriorityProduction,
				Resources:   domain.Resources{CPUMillis: 500, MemoryBytes: 1 << 20},
				Constraints: []domain.Constraint{{Key: "zone", Op: "EQ", Value: "a"}}, Coscheduled: true, Plugin: "shell",
				AttemptTimeout: 90 * time.Second, SchedulingDeadline: &deadline}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			tasks := domain.StepTasks(tc.step, tc.defaults, now)
			require.Len(t, tasks, tc.replicas)
			for i, task := range tasks {
				want := tc.want
				want.Idx = i
				require.Equal(t, want, task, "replica %d", i)
			}
		})
	}
}

// Each task owns its constraints: a change to one task's or to the step's
// reaches no other.
func TestStepTasksOwnTheirConstraints(t *testing.T) {
	t.Parallel()
	n := 2
	step := domain.Step{Name: "s", Command: "true", Replicas: &n, Constraints: []domain.Constraint{{Key: "zone", Op: "EQ", Value: "a"}}}
	tasks := domain.StepTasks(step, domain.DefaultMaxSystemFailures, time.Now())
	tasks[0].Constraints[0].Value = "b"
	step.Constraints[0].Value = "c"
	require.Equal(t, "a", tasks[1].Constraints[0].Value)
}
