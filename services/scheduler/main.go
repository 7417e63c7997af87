// Command capstan-scheduler makes Capstan's decisions: run expansion and
// progression, retries with backoff, schedules' firings, and (as the one
// leader) task placement, the deletion of expired runs and the history
// tables' day partitions.
// It serves /healthz, /readyz and /metrics on CAPSTAN_METRICS_ADDR.
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
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/obs/gauges"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/pkg/svc/backing"
	"github.com/capstan-run/capstan/services/scheduler/internal/firing"
	"github.com/capstan-run/capstan/services/scheduler/internal/history"
	"github.com/capstan-run/capstan/services/scheduler/internal/retention"
	"github.com/capstan-run/capstan/services/scheduler/internal/scheduler"
	"github.com/hibiken/asynq"
)

// service names the scheduler in its logs.
const service = "scheduler"

func main() {
	cfg, err := env.ParseAs[config]()
	svc.Healthcheck(os.Args[1:], cfg.MetricsAddr)
	log := svc.Setup(service, cfg.Common, errors.Join(err, cfg.validate()))
	svc.Exit(log, run(cfg, log))
}

// run wires the scheduler and its consumer and runs them until SIGINT or
// SIGTERM, then shuts down gracefully.
func run(cfg config, log *slog.Logger) error {
	return backing.Run(cfg.Common, log, func(ctx context.Context, deps *backing.Deps) error {
		stopTracing, err := svc.StartTracing(ctx, service, log)
		if err != nil {
			return fmt.Errorf("start tracing: %w", err)
		}
		defer stopTracing()
		enq := queue.NewEnqueuer(deps.Client, log)
		enq.Wake = deps.Redis
		if enq.Payloads, err = obs.NewPayloadSizes(deps.Registry); err != nil {
			return fmt.Errorf("register payload sizes: %w", err)
		}
		sched := scheduler.New(deps.Store, enq, log, deps.Registry, cfg.scheduler(deps.Inspector))
		// Every replica fires schedules: their rows' locks share the work.
		fire := firing.New(deps.Store, enq, log, deps.Registry, cfg.firing())
		// The leader counts; a sum over the replicas stays right.
		deps.Registry.MustRegister(gauges.NewStateCollector(deps.Store.Tasks(), cfg.MetricsRefresh, log).When(sched.IsLeader),
			gauges.NewQueueCollector(deps.Inspector, cfg.MetricsRefresh, log).When(sched.IsLeader))
		consumer := asynq.NewServer(cfg.Redis(), cfg.consumer(ctx, log))
		mux := asynq.NewServeMux()
		sched.Register(mux)
		if err := consumer.Start(mux); err != nil {
			return fmt.Errorf("start consumer: %w", err)
		}
		defer consumer.Shutdown()
		// New tasks announced on the wake list are taken at once, not at
		// the queue's next poll.
		wake := &queue.WakeConsumer{Queue: queue.Scheduler, Redis: cfg.Redis(), Enqueuer: enq, Handler: mux,
			Concurrency: cfg.Workers, Log: log}
		// Opened before wg: the reaper is done with it before it closes.
		arch, err := archive.Open(ctx, cfg.ArchiveURL)
		if err != nil {
			return err
		}
		defer arch.Close()
		var wg sync.WaitGroup
		wg.Go(func() { wake.Run(ctx) })
		defer wg.Wait()
		health, err := svc.NewHealthServer(cfg.MetricsAddr, deps.Registry, deps.Ready)
		if err != nil {
			return fmt.Errorf("listen metrics: %w", err)
		}
		go func() { _ = health.Run(ctx) }()
		var archiveTo retention.Archive
		if arch != nil {
			archiveTo = retention.ArchiveTo(arch, deps.Store)
			log.Info("archive on: an expired run is archived before it is deleted")
		}
		reaper := retention.New(deps.Store, enq, archiveTo, log, deps.Registry, cfg.retention())
		if err := reaper.Publish(ctx); err != nil {
			return err
		}
		wg.Go(func() { reaper.Run(ctx, sched.IsLeader) })
		// The leader keeps the history tables' day partitions, dropping
		// those older than the oldest run left (store.History.Horizon).
		parts := history.New(deps.Store, log, deps.Registry, cfg.history(history.OldestRun(deps.Store, log)))
		wg.Go(func() { parts.Run(ctx, sched.IsLeader) })
		log.Info("scheduler started", "metrics", health.Addr())
		fire.Start(ctx)
		sched.Run(ctx)
		<-fire.Stopped()
		return nil
	})
}
