package store_test

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestStatementsAreTimedByTheirNamedStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := store.NewOperationSeconds()
	st, err := store.Open(ctx, storetest.NewURL(t), store.Config{OperationSeconds: h})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	key := domain.RunKey{Project: "p", Domain: "d", Run: "r1"}
	_, _, err = st.Runs().CreateRun(ctx, store.NewRun{Key: key,
		Spec: domain.WorkflowSpec{Mode: domain.ModeStepByStep, Steps: []domain.Step{{Name: "s", Command: "true"}}}})
	require.NoError(t, err)
	_, err = st.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	_, err = st.Tasks().CountStates(ctx)
	require.NoError(t, err)
	_, err = st.Triggers().KeyTriggers(ctx, "p", "d", "k")
	require.NoError(t, err)
	_, _, err = st.Triggers().PublishEvent(ctx, store.PublishedEvent{Project: "p", Domain: "d", ID: "e", Key: "k"}, nil)
	require.NoError(t, err)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	timed := map[string]uint64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			timed[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	for _, op := range []string{"CreateRun", "GetRun", "CountStates", "KeyTriggers", "PublishEvent"} {
		require.Positive(t, timed[op], "%s in %v", op, timed)
	}
	require.NotContains(t, timed, "InTx")
}

func TestCountStatesGroupsActionsTasksAndWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	key := domain.RunKey{Project: "p", Domain: "d", Run: "r1"}
	_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key,
		Spec: domain.WorkflowSpec{Mode: domain.ModeStepByStep, Steps: []domain.Step{{Name: "s", Command: "true"}}}})
	require.NoError(t, err)
	storetest.StartSteps(t, st, key, "s")
	_, err = st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 1})
	require.NoError(t, err)

	c, err := st.Tasks().CountStates(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Tasks["PENDING"], "%+v", c)
	require.Equal(t, int64(1), c.Workers[store.WorkerAlive])
	var actions int64
	for _, n := range c.Actions {
		actions += n
	}
	require.Equal(t, int64(2), actions, "the root and the step: %+v", c.Actions)
}

func TestMigrationsAtHead(t *testing.T) {
	t.Parallel()
	require.NoError(t, storetest.New(t).MigrationsAtHead(context.Background()))
}
