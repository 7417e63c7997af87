package obs

import (
	"context"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InjectTask writes ctx's trace context into t's headers, so that its
// consumer's span (TaskMiddleware) continues the trace. A task built
// without headers (asynq.NewTask) carries none: pkg/queue builds every
// task with a header map.
func InjectTask(ctx context.Context, t *asynq.Task) {
	if h := t.Headers(); h != nil {
		otel.GetTextMapPropagator().Inject(ctx, propagation.MapCarrier(h))
	}
}

// TaskMiddleware starts a consumer span "asynq <type>" around each task a
// handler takes, the child of the trace context its headers carry
// (InjectTask), with the task's id, queue and retry count as attributes;
// a handler's error marks the span failed.
func TaskMiddleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if h := t.Headers(); h != nil {
			ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(h))
		}
		attrs := []attribute.KeyValue{attribute.String("messaging.system", "asynq"),
			attribute.String("messaging.operation.type", "process")}
		if id, ok := asynq.GetTaskID(ctx); ok {
			attrs = append(attrs, attribute.String("messaging.message.id", id))
		}
		if q, ok := asynq.GetQueueName(ctx); ok {
			attrs = append(attrs, attribute.String("messaging.destination.name", q))
		}
		if n, ok := asynq.GetRetryCount(ctx); ok {
			attrs = append(attrs, attribute.Int("asynq.retry_count", n))
		}
		ctx, span := Tracer().Start(ctx, "asynq "+t.Type(), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attrs...))
		defer span.End()
		err := next.ProcessTask(ctx, t)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return err
	})
}
