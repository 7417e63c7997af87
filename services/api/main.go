// Command capstan-api serves Capstan's public REST API, the dashboard and
// /metrics. `capstan-api migrate` applies the database migrations and exits.
// Configuration is read from the environment: see config.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	_ "time/tzdata" // schedules' zones, whatever the image holds

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/pkg/archive"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/pkg/svc/backing"
	"github.com/capstan-run/capstan/services/api/internal/beatpath"
	"github.com/capstan-run/capstan/services/api/internal/feed"
	"github.com/capstan-run/capstan/services/api/internal/server"
	"github.com/hibiken/asynqmon"
)

// service names the api in its logs.
const service = "api"

func main() {
	cfg, err := parseConfig(os.Args[1:], env.Options{})
	if cfg.healthcheck {
		os.Exit(svc.ProbeExit(cfg.Addr, os.Stderr))
	}
	log := svc.Setup(service, cfg.Common, errors.Join(err, cfg.validate()))
	svc.Exit(log, run(cfg, log))
}

// run applies the migrations when asked to; otherwise it serves the API
// until SIGINT or SIGTERM, then shuts down gracefully.
func run(cfg config, log *slog.Logger) error {
	if cfg.migrate {
		return migrate(cfg, log)
	}
	arch, err := archive.Open(context.Background(), cfg.ArchiveURL)
	if err != nil {
		return err
	}
	defer arch.Close()
	if arch != nil {
		log.Info("archive on: a deleted run is archived first")
	}
	return backing.Run(cfg.Common, log, func(ctx context.Context, deps *backing.Deps) error {
		stopTracing, err := svc.StartTracing(ctx, service, log)
		if err != nil {
			return fmt.Errorf("start tracing: %w", err)
		}
		defer stopTracing()
		queues := asynqmon.New(asynqmon.Options{RootPath: server.QueuesPath, RedisConnOpt: cfg.Redis()})
		defer queues.Close()
		// One LISTEN connection for every event stream of this process, while
		// it has any.
		hub := feed.New(cfg.DatabaseURL, 0, 0, log)
		go func() { _ = hub.Run(ctx) }()
		enq := queue.NewEnqueuer(deps.Client, log)
		enq.Wake = deps.Redis // the scheduler hears of new work at once
		e := server.New(server.Deps{Store: deps.Store, Enqueuer: enq,
			Log: log, Registry: deps.Registry, Ready: deps.Ready, Stopping: ctx.Done(), Queues: queues, Feed: hub,
			Archive: arch},
			cfg.server())
		srv, err := svc.Listen(cfg.Addr, e)
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		log.Info("api listening", "addr", srv.Addr())
		// While it serves, the api stamps that heartbeats can reach
		// Postgres: the scheduler's liveness fence reads it.
		stamps := beatpath.New(deps.Store, log, beatpath.Config{Every: cfg.stampEvery()})
		stampCtx, stopStamps := context.WithCancel(ctx)
		var stamping sync.WaitGroup
		stamping.Go(func() { stamps.Run(stampCtx) })
		defer stamping.Wait()
		defer stopStamps()
		return srv.Run(ctx)
	})
}

// migrate applies the database migrations.
func migrate(cfg config, log *slog.Logger) error {
	ctx, stop := svc.SignalContext()
	defer stop()
	if err := store.Migrate(ctx, cfg.DatabaseURL); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	log.Info("migrations applied")
	return nil
}
