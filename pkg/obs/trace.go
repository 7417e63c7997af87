package obs

import (
	"context"
	"errors"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the spans Capstan's own code starts.
const TracerName = "github.com/capstan-run/capstan"

// EnvEndpoint is the OpenTelemetry variable that turns tracing on.
const EnvEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"

// Tracer returns Capstan's tracer from the global provider (a no-op until
// SetupTracing installs one; a no-op span still carries its parent's trace
// context, so propagation works with tracing off).
func Tracer() trace.Tracer { return otel.Tracer(TracerName) }

// SetupTracing installs the W3C trace context propagator and, when
// OTEL_EXPORTER_OTLP_ENDPOINT is set, a tracer provider that batches spans
// of service (its service.name) to that endpoint over OTLP/HTTP protobuf
// (the otlptracehttp exporter, which reads the other OTEL_EXPORTER_OTLP_*
// and OTEL_BSP_* variables). Without the variable nothing is exported.
// Call the returned shutdown before exit: it flushes the spans still
// batched. Errors: the exporter's configuration is invalid.
func SetupTracing(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if os.Getenv(EnvEndpoint) == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	tp := NewTracerProvider(service, sdktrace.WithBatcher(exp))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// NewTracerProvider returns a provider of spans of service, sampling every
// trace (unless OTEL_TRACES_SAMPLER says otherwise), with opts (an exporter).
func NewTracerProvider(service string, opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", "capstan-"+service)))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		res = resource.Default()
	}
	return sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithResource(res)}, opts...)...)
}

// TraceParent returns ctx's span context as a W3C traceparent header value,
// or "" when ctx carries none.
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent returns ctx with the remote span context of tp (a W3C
// traceparent header value); ctx as is when tp is empty or invalid.
func WithTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}
