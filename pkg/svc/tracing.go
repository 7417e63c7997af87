package svc

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/capstan-run/capstan/pkg/obs"
)

// tracingFlushTimeout bounds the flush of the spans still batched at exit.
const tracingFlushTimeout = 5 * time.Second

// StartTracing sets up OpenTelemetry tracing for service (obs.SetupTracing:
// exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set, off
// otherwise) and logs which. Call the returned stop before exit: it flushes
// the batched spans for up to 5s. Errors: the exporter's configuration is
// invalid.
func StartTracing(ctx context.Context, service string, log *slog.Logger) (stop func(), err error) {
	shutdown, err := obs.SetupTracing(ctx, service)
	if err != nil {
		return nil, err
	}
	if ep := os.Getenv(obs.EnvEndpoint); ep != "" {
		log.Info("exporting traces", "endpoint", ep)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("traces not flushed", "err", err)
		}
	}, nil
}
