package domain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// The step-slot rule (Airflow's pools, Argo's semaphores): "at most
// max_tasks tasks of one key are ASSIGNED, BUILDING or RUNNING at a time".
func TestSlotFree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		held, max int
		want      bool
		rule      string
	}{
		{0, 1, true, "no task of the key runs: a slot is free"},
		{1, 1, false, "max_tasks 1: one running task holds the only slot"},
		{2, 3, true, "fewer than max_tasks hold a slot"},
		{3, 3, false, "max_tasks hold every slot"},
		{4, 3, false, "more than max_tasks (a lowered max): none is free"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, domain.SlotFree(tc.held, tc.max), tc.rule)
	}
	require.Equal(t, `concurrency key "db-migrate": 1 of 1 running`, domain.SlotWaitReason("db-migrate", 1, 1))
}

func TestTaskAdmissions(t *testing.T) {
	t.Parallel()
	one, three := 1, 3
	params := map[string]any{"env": "prod"}
	tests := []struct {
		name   string
		step   domain.Step
		n      int
		want   []domain.TaskAdmission
		fields []string
	}{
		{name: "a step without admission fields costs nothing", step: domain.Step{Name: "s"}, n: 3},
		{name: "a constant key for every task", n: 2,
			step: domain.Step{Concurrency: &domain.StepConcurrency{Key: `"db-migrate"`, MaxTasks: 1}},
			want: []domain.TaskAdmission{{ConcurrencyKey: ptr("db-migrate"), ConcurrencyMax: 1},
				{ConcurrencyKey: ptr("db-migrate"), ConcurrencyMax: 1}}},
		{name: "keys over params and index; units default to 1", n: 2,
			step: domain.Step{RateLimits: []domain.RateLimitUse{{Name: "api", Key: `params.env + "-" + string(index)`},
				{Name: "db", Units: &three}}},
			want: []domain.TaskAdmission{
				{RateLimits: []domain.TaskRateLimit{{Name: "api", Key: "prod-0", Units: 1}, {Name: "db", Units: 3}}},
				{RateLimits: []domain.TaskRateLimit{{Name: "api", Key: "prod-1", Units: 1}, {Name: "db", Units: 3}}}}},
		{name: "a key that evaluates to empty is the key empty", n: 1,
			step: domain.Step{RateLimits: []domain.RateLimitUse{{Name: "api", Key: `""`, Units: &one}}},
			want: []domain.TaskAdmission{{RateLimits: []domain.TaskRateLimit{{Name: "api", Units: 1}}}}},
		{name: "a key that fails at an index names its field once", n: 3,
			step: domain.Step{Concurrency: &domain.StepConcurrency{Key: `index > 0 ? params.missing : "a"`, MaxTasks: 2}},
			want: []domain.TaskAdmission{{ConcurrencyKey: ptr("a"), ConcurrencyMax: 2},
				{ConcurrencyKey: ptr(""), ConcurrencyMax: 2}, {ConcurrencyKey: ptr(""), ConcurrencyMax: 2}},
			fields: []string{"spec.steps[0].concurrency.key"}},
	}
	for _, tc := range tests {
		got, errs := tc.step.TaskAdmissions(params, tc.n, "spec.steps[0]")
		require.Equal(t, tc.want, got, tc.name)
		var fields []string
		for _, e := range errs {
			fields = append(fields, e.Field)
		}
		require.Equal(t, tc.fields, fields, tc.name)
	}
}

func ptr[T any](v T) *T { return &v }
