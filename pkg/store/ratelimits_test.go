package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

func TestRateLimitsPutGetListDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	rl := st.RateLimits()
	r, created, err := rl.PutRateLimit(ctx, "p", "paid-api", domain.TokenRate{Limit: 100, Per: time.Second})
	require.NoError(t, err)
	require.True(t, created, "the first put creates")
	require.Equal(t, 100, r.LimitCount)
	r, created, err = rl.PutRateLimit(ctx, "p", "paid-api", domain.TokenRate{Limit: 5, Per: time.Minute})
	require.NoError(t, err)
	require.False(t, created, "a second put replaces")
	require.Equal(t, domain.TokenRate{Limit: 5, Per: time.Minute}, r.Rate())
	_, _, err = rl.PutRateLimit(ctx, "other", "db", domain.TokenRate{Limit: 1, Per: time.Hour})
	require.NoError(t, err)

	got, err := rl.GetRateLimit(ctx, "p", "paid-api")
	require.NoError(t, err)
	require.Equal(t, 5, got.LimitCount)
	_, err = rl.GetRateLimit(ctx, "p", "db")
	require.ErrorIs(t, err, store.ErrNotFound, "another project's limit is not this one's")
	list, next, err := rl.ListRateLimits(ctx, "p", "", 0)
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, list, 1)
	names, err := rl.RateLimitNames(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"paid-api": true}, names)

	require.NoError(t, rl.DeleteRateLimit(ctx, "p", "paid-api"))
	require.ErrorIs(t, rl.DeleteRateLimit(ctx, "p", "paid-api"), store.ErrNotFound)
}

// The pass's admission read counts a key's live tasks from the task rows
// and reads the buckets its tasks take; TakeTokens writes them, and
// TaskSlots is the key's ledger.
func TestAdmissionStateTakeTokensAndTaskSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	_, _, err := st.RateLimits().PutRateLimit(ctx, "p", "api", domain.TokenRate{Limit: 10, Per: time.Second})
	require.NoError(t, err)
	two := 2
	key := newRun(t, st, "r", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: &two,
		Concurrency: &domain.StepConcurrency{Key: `"db-migrate"`, MaxTasks: 1},
		RateLimits:  []domain.RateLimitUse{{Name: "api"}}}}})
	plain := newRun(t, st, "plain", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true"}}})
	storetest.StartSteps(t, st, key)
	storetest.StartSteps(t, st, plain)
	w, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	require.NoError(t, err)

	read, err := st.Placement().PendingWork(ctx, 10, 32, time.Minute)
	require.NoError(t, err)
	tasks := read.Tasks
	require.Len(t, tasks, 3)
	var limited []store.Task
	for _, tk := range tasks {
		if tk.RunName == "plain" {
			require.False(t, tk.HasAdmission(), "a step without admission fields")
			require.Nil(t, tk.ConcurrencyKey)
			require.Nil(t, tk.RateLimits)
			continue
		}
		require.Equal(t, "db-migrate", *tk.ConcurrencyKey)
		require.Equal(t, 1, *tk.ConcurrencyMax)
		require.Equal(t, []domain.TaskRateLimit{{Name: "api", Units: 1}}, tk.RateLimits)
		limited = append(limited, tk)
	}
	slot := store.SlotKey{Project: "p", Domain: "d", Key: "db-migrate"}
	bucket := store.BucketKey{Project: "p", Name: "api"}
	state, err := st.Placement().AdmissionState(ctx, limited)
	require.NoError(t, err)
	require.Equal(t, map[store.SlotKey]int{slot: 0}, state.Held)
	require.Equal(t, domain.TokenRate{Limit: 10, Per: time.Second}, state.Rates[store.RateLimitKey{Project: "p", Name: "api"}])
	require.Empty(t, state.Buckets, "a bucket is created on its first take")

	_, ok, err := storetest.AssignTask(ctx, st, limited[0].ID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, st.Placement().TakeTokens(ctx, state.Now, []store.BucketTokens{{BucketKey: bucket, Tokens: 9}}))
	state, err = st.Placement().AdmissionState(ctx, limited)
	require.NoError(t, err)
	require.Equal(t, 1, state.Held[slot], "the assigned task holds the key's slot")
	require.InDelta(t, 9, state.Buckets[bucket].Tokens, 1e-9)

	slots, err := st.Placement().TaskSlots(ctx, "p", "d")
	require.NoError(t, err)
	require.Equal(t, []store.TaskSlot{{Key: "db-migrate", Max: 1, Waiting: 1,
		Holders: []store.SlotHolder{{Run: "r", Action: "s", Task: limited[0].Idx, State: domain.TaskAssigned}}}}, slots)

	require.NoError(t, st.RateLimits().DeleteRateLimit(ctx, "p", "api"))
	state, err = st.Placement().AdmissionState(ctx, limited)
	require.NoError(t, err)
	require.Empty(t, state.Rates, "a deleted limit is not defined")
	require.Empty(t, state.Buckets, "its buckets went with it")
	require.NoError(t, st.Placement().TakeTokens(ctx, state.Now, []store.BucketTokens{{BucketKey: bucket, Tokens: 1}}),
		"a bucket of a deleted limit is not written")
}
