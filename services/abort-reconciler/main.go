// Command capstan-abort-reconciler delivers every abort (of an action) and
// every kill (of one attempt: preemption, timeout) recorded in Postgres to
// the executors holding the live attempts, until it succeeds, finds them
// already gone, or gives up after ABORT_MAX_ATTEMPTS (DESIGN §5). It
// consumes the asynq queue "abort" (action:abort, attempt:kill), resyncs
// pending requests from Postgres on start and every ABORT_RESYNC_PERIOD,
// and serves /healthz, /readyz and /metrics on CAPSTAN_METRICS_ADDR. SIGINT
// or SIGTERM shuts it down gracefully.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/services/abort-reconciler/internal/reconciler"
	"github.com/hibiken/asynq"
)

const service = "abort-reconciler"

func main() {
	cfg, err := env.ParseAs[config]()
	log := svc.NewLogger(service, cfg.LogLevel)
	if err != nil {
		svc.Fatal(log, "invalid configuration", err)
	}
	cfg.StartPprof(log)
	if err := run(cfg, log); err != nil {
		svc.Fatal(log, "abort reconciler failed", err)
	}
}

// run wires the service and blocks until a signal, then shuts down.
func run(cfg config, log *slog.Logger) error {
	ctx, stop := svc.SignalContext()
	defer stop()

	st, err := store.Open(ctx, cfg.DatabaseURL, store.Config{})
	if err != nil {
		return err
	}
	defer st.Close()
	client := asynq.NewClient(cfg.Redis())
	defer client.Close()
	reg := svc.NewRegistry()

	rec, err := reconciler.New(reconciler.Deps{
		Store:    st,
		Redis:    cfg.Redis(),
		Log:      log,
		Registry: reg,
	}, cfg.reconciler())
	if err != nil {
		return err
	}
	health, err := svc.NewHealthServer(cfg.metricsAddr(), reg, func(ctx context.Context) error {
		return ready(ctx, st, client)
	})
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.metricsAddr(), err)
	}
	if err := rec.Start(ctx); err != nil {
		return err
	}
	defer rec.Stop()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	healthDone := make(chan error, 1)
	go func() { healthDone <- health.Run(ctx) }()
	log.Info("serving health and metrics", "addr", health.Addr())

	var healthErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
		cancel()
		healthErr = <-healthDone
	case healthErr = <-healthDone:
		cancel()
	}
	if healthErr != nil {
		return fmt.Errorf("health server: %w", healthErr)
	}
	return nil
}

// ready is /readyz: Postgres and Redis both answer.
func ready(ctx context.Context, st *store.Store, client *asynq.Client) error {
	var errs []error
	if err := st.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("postgres: %w", err))
	}
	if err := client.Ping(); err != nil {
		errs = append(errs, fmt.Errorf("redis: %w", err))
	}
	return errors.Join(errs...)
}
