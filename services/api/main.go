// Command capstan-api serves Capstan's public REST API, the dashboard and
// /metrics. `capstan-api migrate` applies the database migrations and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/services/api/internal/server"
	"github.com/hibiken/asynq"
)

// config is the api's environment.
type config struct {
	svc.Common
	// Addr is the listen address. Default 127.0.0.1:8080.
	Addr string `env:"CAPSTAN_API_ADDR" envDefault:"127.0.0.1:8080"`
	// AbortMaxAttempts bounds delivery attempts of an abort (the reconciler's
	// ABORT_MAX_ATTEMPTS); the api sizes the task's asynq retries from it. Default 10.
	AbortMaxAttempts int `env:"ABORT_MAX_ATTEMPTS" envDefault:"10"`
	// WorkerGrace is how long a worker may miss heartbeats before it is shown
	// as unresponsive. Default 5s.
	WorkerGrace time.Duration `env:"CAPSTAN_WORKER_GRACE" envDefault:"5s"`
	// MaxBodyBytes caps request bodies. Default 1 MiB.
	MaxBodyBytes int64 `env:"CAPSTAN_API_MAX_BODY_BYTES" envDefault:"1048576"`
}

func main() {
	var cfg config
	if err := env.Parse(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "capstan-api: config:", err)
		os.Exit(2)
	}
	log := svc.NewLogger("api", cfg.LogLevel)
	cfg.StartPprof(log)
	ctx, stop := svc.SignalContext()
	defer stop()

	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "migrate":
			if err := store.Migrate(ctx, cfg.DatabaseURL); err != nil {
				svc.Fatal(log, "migrate failed", err)
			}
			log.Info("migrations applied")
			return
		default:
			fmt.Fprintf(os.Stderr, "capstan-api: unknown command %q (want: migrate, or no argument to serve)\n", os.Args[1])
			os.Exit(2)
		}
	}

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
	e := server.New(server.Deps{
		Store:    st,
		Enqueuer: queue.NewEnqueuer(client, log),
		Log:      log,
		Registry: reg,
		Ready: func(ctx context.Context) error {
			if err := st.Ping(ctx); err != nil {
				return fmt.Errorf("postgres: %w", err)
			}
			_, err := inspector.Queues()
			return err
		},
	}, server.Config{AbortMaxAttempts: cfg.AbortMaxAttempts, WorkerGrace: cfg.WorkerGrace, MaxBodyBytes: cfg.MaxBodyBytes})

	srv := &http.Server{Addr: cfg.Addr, Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("api listening", "addr", cfg.Addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		svc.Fatal(log, "serve", err)
	}
	log.Info("api stopped")
}
