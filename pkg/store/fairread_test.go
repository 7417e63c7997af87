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

// fairRun creates and starts a run of project with replicas tasks of one
// step, whose run has fairness key key.
func fairRun(t *testing.T, st *store.Store, project, name, key string, replicas int) domain.RunKey {
	t.Helper()
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "true", Replicas: &replicas}}}
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	k := domain.RunKey{Project: project, Domain: "d", Run: name}
	_, created, err := st.Runs().CreateRun(context.Background(), store.NewRun{Key: k, Spec: spec,
		Keys: domain.AdmissionKeys{Fairness: key}})
	require.NoError(t, err)
	require.True(t, created)
	storetest.StartSteps(t, st, k)
	return k
}

// The pass's read holds every project's and key's oldest tasks however
// many older ones another project holds: 3,000 of project a, then 3 of b
// and 2 of each of two keys of c, read 500 at a time.
func TestPendingWorkReadsEveryProjectAndKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	_, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	require.NoError(t, err)
	for _, name := range []string{"flood-1", "flood-2", "flood-3"} {
		fairRun(t, st, "a", name, "", 1000)
	}
	fairRun(t, st, "b", "few", "", 3)
	fairRun(t, st, "c", "x", "tenant-x", 2)
	fairRun(t, st, "c", "y", "tenant-y", 2)
	require.NoError(t, st.Placement().SetFairWeight(ctx, "b", 3))

	read, err := st.Placement().PendingWork(ctx, 500, 32, time.Minute)
	require.NoError(t, err)
	per := map[domain.FairGroup]int{}
	for _, task := range read.Tasks {
		per[domain.FairGroup{Project: task.Project, Key: task.FairnessKey}]++
	}
	require.Equal(t, map[domain.FairGroup]int{{Project: "a"}: 125, {Project: "b"}: 3,
		{Project: "c", Key: "tenant-x"}: 2, {Project: "c", Key: "tenant-y"}: 2}, per,
		"⌈500 / 4 groups⌉ of each, the copied fairness keys apart")
	require.Equal(t, 125, read.PerGroup)
	require.True(t, read.Full, "a's group was read to its cap")
	require.Len(t, read.Workers, 1)
	require.Equal(t, map[string]int{"b": 3}, read.Weights)
	require.Empty(t, read.Live)
	for i := 1; i < len(read.Tasks); i++ {
		require.Less(t, read.Tasks[i-1].ID, read.Tasks[i].ID, "one band, oldest first")
	}

	// A live task counts for its project and key.
	_, ok, err := storetest.AssignTask(ctx, st, read.Tasks[0].ID, read.Workers[0].ID)
	require.NoError(t, err)
	require.True(t, ok)
	read, err = st.Placement().PendingWork(ctx, 500, 32, time.Minute)
	require.NoError(t, err)
	require.Equal(t, map[domain.FairGroup]int{{Project: "a"}: 1}, read.Live)
}

// A read of one group reads neither live tasks nor weights, and takes the
// whole limit of it; a cap of keys of a project leaves its later keys for
// another pass.
func TestPendingWorkOneGroupAndKeyCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	fairRun(t, st, "a", "r1", "k1", 5)
	read, err := st.Placement().PendingWork(ctx, 4, 2, time.Minute)
	require.NoError(t, err)
	require.Len(t, read.Tasks, 4)
	require.True(t, read.Full)
	read, err = st.Placement().PendingWork(ctx, 6, 2, time.Minute)
	require.NoError(t, err)
	require.Len(t, read.Tasks, 5)
	require.False(t, read.Full, "a read of 6 holds every task of the one group")
	require.Nil(t, read.Live)
	require.Nil(t, read.Weights)

	fairRun(t, st, "a", "r2", "k2", 1)
	fairRun(t, st, "a", "r3", "k3", 1)
	read, err = st.Placement().PendingWork(ctx, 4, 2, time.Minute)
	require.NoError(t, err)
	keys := map[string]int{}
	for _, task := range read.Tasks {
		keys[task.FairnessKey]++
	}
	require.Equal(t, map[string]int{"k1": 2, "k2": 1}, keys, "2 keys of a, 2 of each")
	require.True(t, read.Full, "k3 was left unread")
}

// A project's fair-share weight is 1 until set, then the last set.
func TestFairWeight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	w, err := st.Placement().FairWeight(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, domain.DefaultFairWeight, w)
	require.NoError(t, st.Placement().SetFairWeight(ctx, "p", 7))
	require.NoError(t, st.Placement().SetFairWeight(ctx, "p", 9))
	w, err = st.Placement().FairWeight(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, 9, w)
}
