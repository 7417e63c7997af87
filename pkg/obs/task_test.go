package obs_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTaskCarriesTheTrace: a span enqueued through the Enqueuer continues
// in the consumer's span, in the same trace, through real Redis.
func TestTaskCarriesTheTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := obs.NewTracerProvider("test", sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	_, err := obs.SetupTracing(context.Background(), "test") // the propagator; no endpoint, no exporter
	require.NoError(t, err)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	opt := redistest.New(t)
	client := asynq.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	handled := make(chan struct{})
	srv := asynq.NewServer(opt, asynq.Config{Queues: map[string]int{queue.Scheduler: 1},
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.Use(obs.TaskMiddleware)
	mux.HandleFunc(queue.TypeRunStart, func(context.Context, *asynq.Task) error { close(handled); return nil })
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)

	ctx, span := obs.Tracer().Start(context.Background(), "create run")
	e := queue.NewEnqueuer(client, slog.New(slog.DiscardHandler))
	require.NoError(t, e.Enqueue(ctx, queue.NewRunStartTask(domain.RunKey{Project: "p", Domain: "d", Run: "r"})))
	span.End()
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("task not handled")
	}
	require.Eventually(t, func() bool { return len(exp.GetSpans()) == 2 }, 5*time.Second, 10*time.Millisecond)
	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	consumer := byName["asynq "+queue.TypeRunStart]
	require.Equal(t, span.SpanContext().TraceID(), consumer.SpanContext.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), consumer.Parent.SpanID())
}

func TestTraceParentRoundTrip(t *testing.T) {
	t.Parallel()
	tp := obs.NewTracerProvider("test")
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	parent := obs.TraceParent(ctx)
	require.NotEmpty(t, parent)
	back := obs.WithTraceParent(context.Background(), parent)
	_, child := tp.Tracer("t").Start(back, "c")
	defer child.End()
	require.Equal(t, span.SpanContext().TraceID(), child.SpanContext().TraceID())
	require.Empty(t, obs.TraceParent(context.Background()))
	require.Equal(t, context.Background(), obs.WithTraceParent(context.Background(), ""))
}
