// Command capstan-abort-reconciler delivers every abort (of an action) and
// every kill (of one attempt: preemption, timeout) recorded in Postgres to
// the executors holding the live attempts, until it succeeds, finds them
// already gone, or gives up after ABORT_MAX_ATTEMPTS (Flyte's abort
// reconciler, on asynq; see docs/design-notes.md, Aborts and kills). It
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
	"os"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/pkg/svc/backing"
	"github.com/capstan-run/capstan/services/abort-reconciler/internal/reconciler"
)

// service names the abort reconciler in its logs.
const service = "abort-reconciler"

func main() {
	cfg, err := env.ParseAs[config]()
	svc.Healthcheck(os.Args[1:], cfg.metricsAddr())
	log := svc.Setup(service, cfg.Common, errors.Join(err, cfg.validate()))
	svc.Exit(log, run(cfg, log))
}

// run wires the reconciler and runs it until SIGINT or SIGTERM, or until
// its health server fails, then shuts down gracefully.
func run(cfg config, log *slog.Logger) error {
	return backing.Run(cfg.Common, log, func(ctx context.Context, deps *backing.Deps) error {
		stopTracing, err := svc.StartTracing(ctx, service, log)
		if err != nil {
			return fmt.Errorf("start tracing: %w", err)
		}
		defer stopTracing()
		rec, err := reconciler.New(reconciler.Deps{Store: reconciler.StoreOf(deps.Store), Redis: cfg.Redis(), Log: log,
			Registry: deps.Registry}, cfg.reconciler())
		if err != nil {
			return err
		}
		health, err := svc.NewHealthServer(cfg.metricsAddr(), deps.Registry, deps.Ready)
		if err != nil {
			return fmt.Errorf("listen metrics: %w", err)
		}
		if err := rec.Start(ctx); err != nil {
			return err
		}
		defer rec.Stop()
		log.Info("serving health and metrics", "addr", health.Addr())
		if err := health.Run(ctx); err != nil {
			return fmt.Errorf("health server: %w", err)
		}
		return nil
	})
}
