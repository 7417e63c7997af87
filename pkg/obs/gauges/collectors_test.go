package gauges_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/obs/gauges"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestStateCollectorCountsOncePerRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	key := domain.RunKey{Project: "p", Domain: "d", Run: "r1"}
	_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key,
		Spec: domain.WorkflowSpec{Mode: domain.ModeStepByStep, Steps: []domain.Step{{Name: "s", Command: "true"}}}})
	require.NoError(t, err)
	storetest.StartSteps(t, st, key, "s")

	c := gauges.NewStateCollector(st.Tasks(), time.Hour, slog.New(slog.DiscardHandler))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for range 5 { // five scrapes, one count
		_, err := reg.Gather()
		require.NoError(t, err)
	}
	require.Equal(t, 1, c.Refreshes())
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP capstan_tasks_active Tasks by state (Iris's task states), from one grouped count per refresh interval.
# TYPE capstan_tasks_active gauge
capstan_tasks_active{state="ASSIGNED"} 0
capstan_tasks_active{state="BUILDING"} 0
capstan_tasks_active{state="FAILED"} 0
capstan_tasks_active{state="KILLED"} 0
capstan_tasks_active{state="PENDING"} 1
capstan_tasks_active{state="PREEMPTED"} 0
capstan_tasks_active{state="RUNNING"} 0
capstan_tasks_active{state="SUCCEEDED"} 0
capstan_tasks_active{state="UNSCHEDULABLE"} 0
capstan_tasks_active{state="WORKER_FAILED"} 0
`), "capstan_tasks_active"))
	n, err := testutil.GatherAndCount(reg, "capstan_actions_active", "capstan_workers")
	require.NoError(t, err)
	require.Equal(t, 13+2, n)
}

func TestStateCollectorRefreshesWhenStale(t *testing.T) {
	t.Parallel()
	c := gauges.NewStateCollector(storetest.New(t).Tasks(), time.Nanosecond, slog.New(slog.DiscardHandler))
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	for range 3 {
		_, err := reg.Gather()
		require.NoError(t, err)
	}
	require.Equal(t, 3, c.Refreshes())
}

func TestQueueCollectorReadsEachQueue(t *testing.T) {
	t.Parallel()
	opt := redistest.New(t)
	client := asynq.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	_, err := client.Enqueue(queue.NewRunStartTask(domain.RunKey{Project: "p", Domain: "d", Run: "r"}))
	require.NoError(t, err)
	for _, w := range []string{"w1", "w2"} {
		_, err = client.Enqueue(queue.NewAttemptRunTask(w, 1, nil))
		require.NoError(t, err)
	}
	in := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = in.Close() })

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(gauges.NewQueueCollector(in, time.Hour, slog.New(slog.DiscardHandler)))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	require.Equal(t, 1.0, got["capstan_queue_tasks,scheduler,pending"], "%v", got)
	require.Contains(t, got, "capstan_queue_latency_seconds,scheduler")
	require.Equal(t, 2.0, got["capstan_queue_tasks,worker,pending"], "the worker queues summed: %v", got)
	require.NotContains(t, got, "capstan_queue_tasks,worker:w1,pending")
}

func TestPayloadSizes(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	p, err := obs.NewPayloadSizes(reg)
	require.NoError(t, err)
	p.Observe(obs.KindSpec, 100)
	(*obs.PayloadSizes)(nil).Observe(obs.KindSpec, 1) // a nil observer is a no-op
	n, err := testutil.GatherAndCount(reg, "capstan_payload_size_bytes")
	require.NoError(t, err)
	require.Equal(t, 4, n)
}

func TestCollectorsExportOnlyWhenActive(t *testing.T) {
	t.Parallel()
	active := false
	c := gauges.NewStateCollector(storetest.New(t).Tasks(), time.Hour, slog.New(slog.DiscardHandler)).
		When(func() bool { return active })
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, c.Refreshes(), "an inactive collector counts nothing")
	active = true
	n, err = testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Positive(t, n)
}
