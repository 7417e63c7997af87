// Command capstan-scheduler makes Capstan's decisions: run expansion and
// progression, retries with backoff, and (as the one leader) task placement.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/services/scheduler/internal/scheduler"
	"github.com/hibiken/asynq"
)

// config is the scheduler's environment.
type config struct {
	svc.Common
	// MetricsAddr serves /healthz, /readyz and /metrics. Default 127.0.0.1:9091.
	MetricsAddr string `env:"CAPSTAN_METRICS_ADDR" envDefault:"127.0.0.1:9091"`
	// Workers is the asynq concurrency on the scheduler queue. Default 10.
	Workers int `env:"CAPSTAN_SCHEDULER_WORKERS" envDefault:"10"`
	// Tick is the idle scheduling pass period. Default 1s.
	Tick time.Duration `env:"CAPSTAN_SCHEDULER_TICK" envDefault:"1s"`
	// ResyncPeriod re-derives all work from Postgres. Default 5m.
	ResyncPeriod time.Duration `env:"CAPSTAN_RESYNC_PERIOD" envDefault:"5m"`
	// WorkerGrace: a worker silent this long is dead: its attempts become
	// WORKER_FAILED and are requeued. Default 5s (five heartbeats).
	WorkerGrace time.Duration `env:"CAPSTAN_WORKER_GRACE" envDefault:"5s"`
	// WorkerBackoffTable is ARC's failure backoff: a worker with n failures
	// takes no new work until entry n after the last one, and is deleted
	// past the last entry (its executor registers again). Durations, comma
	// separated. Default 0s,5s,10s,20s,40s,80s.
	WorkerBackoffTable []time.Duration `env:"CAPSTAN_WORKER_BACKOFF_TABLE" envSeparator:"," envDefault:"0s,5s,10s,20s,40s,80s"`
	// DeadWorkerRetention is how long a dead worker stays listed before its
	// row is deleted. Default 1h.
	DeadWorkerRetention time.Duration `env:"CAPSTAN_DEAD_WORKER_RETENTION" envDefault:"1h"`
	// DispatchGrace: an ASSIGNED attempt older than this is re-dispatched by
	// the resync (its message may have been lost with Redis). Default 30s.
	DispatchGrace time.Duration `env:"CAPSTAN_DISPATCH_GRACE" envDefault:"30s"`
	// RetryInitialDelay and RetryMaxDelay bound the full-jitter task retry
	// backoff. Defaults 1s and 5m.
	RetryInitialDelay time.Duration `env:"CAPSTAN_RETRY_INITIAL_DELAY" envDefault:"1s"`
	RetryMaxDelay     time.Duration `env:"CAPSTAN_RETRY_MAX_DELAY" envDefault:"5m"`
	// PollInterval is asynq's TaskCheckInterval: an idle consumer polls this
	// often. Default 50ms.
	PollInterval time.Duration `env:"CAPSTAN_POLL_INTERVAL" envDefault:"50ms"`
	// DelayedTaskCheckInterval moves scheduled and retry tasks to pending.
	// Default 100ms (asynq's 5s would delay short backoffs).
	DelayedTaskCheckInterval time.Duration `env:"CAPSTAN_DELAYED_TASK_CHECK_INTERVAL" envDefault:"100ms"`
	// AbortMaxAttempts sizes abort tasks' asynq retries. Default 10.
	AbortMaxAttempts int `env:"ABORT_MAX_ATTEMPTS" envDefault:"10"`
}

func main() {
	var cfg config
	if err := env.Parse(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "capstan-scheduler: config:", err)
		os.Exit(2)
	}
	log := svc.NewLogger("scheduler", cfg.LogLevel)
	cfg.StartPprof(log)
	ctx, stop := svc.SignalContext()
	defer stop()

	st, err := store.Open(ctx, cfg.DatabaseURL, store.Config{})
	if err != nil {
		svc.Fatal(log, "open store", err)
	}
	defer st.Close()
	client := asynq.NewClient(cfg.Redis())
	defer client.Close()
	inspector := asynq.NewInspector(cfg.Redis())
	defer inspector.Close()
	reg := svc.NewRegistry()
	sched := scheduler.New(st, queue.NewEnqueuer(client, log), log, reg, scheduler.Config{
		Tick: cfg.Tick, ResyncPeriod: cfg.ResyncPeriod, DispatchGrace: cfg.DispatchGrace, WorkerGrace: cfg.WorkerGrace,
		Retry:         domain.FullJitter{Initial: cfg.RetryInitialDelay, Max: cfg.RetryMaxDelay},
		AbortMaxRetry: cfg.AbortMaxAttempts + 5,
		Liveness: scheduler.LivenessConfig{Backoff: domain.Table(cfg.WorkerBackoffTable),
			DeadRetention: cfg.DeadWorkerRetention, Queues: inspector},
	})

	srv := asynq.NewServer(cfg.Redis(), asynq.Config{
		Concurrency: cfg.Workers, Queues: map[string]int{queue.Scheduler: 1},
		TaskCheckInterval: cfg.PollInterval, DelayedTaskCheckInterval: cfg.DelayedTaskCheckInterval,
		ShutdownTimeout: 5 * time.Second, Logger: svc.AsynqLogger(log), LogLevel: svc.AsynqLevel(ctx, log),
		RetryDelayFunc: func(n int, _ error, _ *asynq.Task) time.Duration {
			return domain.FullJitter{Initial: 100 * time.Millisecond, Max: 10 * time.Second}.Delay(n)
		},
	})
	mux := asynq.NewServeMux()
	sched.Register(mux)
	if err := srv.Start(mux); err != nil {
		svc.Fatal(log, "start consumer", err)
	}
	defer srv.Shutdown()

	health, err := svc.NewHealthServer(cfg.MetricsAddr, reg, func(ctx context.Context) error {
		if err := st.Ping(ctx); err != nil {
			return err
		}
		_, err := inspector.Queues()
		return err
	})
	if err != nil {
		svc.Fatal(log, "listen metrics", err)
	}
	go func() { _ = health.Run(ctx) }()
	log.Info("scheduler started", "metrics", health.Addr())
	sched.Run(ctx)
	log.Info("scheduler stopped")
}
