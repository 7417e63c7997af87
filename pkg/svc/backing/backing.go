// Package backing opens what Capstan's control-plane services (api,
// scheduler, abort reconciler) stand on: Postgres through the store, Redis
// through asynq, and a Prometheus registry, with the readiness check over
// them, and runs such a service until a signal. It is apart from svc so that
// the executor, which uses neither Postgres nor the store, does not link
// them.
package backing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Deps are what the control-plane services (api, scheduler, abort
// reconciler) open at start. Build them with Open (or Run), release them
// with Close.
type Deps struct {
	// Store is the Postgres pool at svc.Common.DatabaseURL.
	Store *store.Store
	// Client enqueues asynq tasks in the Redis at svc.Common.RedisAddr.
	Client *asynq.Client
	// Inspector reads the asynq queues in the same Redis.
	Inspector *asynq.Inspector
	// Redis is a plain client of the same Redis, for what is not a queue
	// (executors' wake lists).
	Redis redis.UniversalClient
	// Registry is the service's Prometheus registry, with the Go and
	// process collectors; its /metrics serves it.
	Registry *prometheus.Registry
}

// Open opens the store (pinging Postgres: an unreachable database is an
// error here), the asynq client and inspector (they connect to Redis on
// first use) and a new registry, which holds
// capstan_db_operation_duration_seconds of the store's statements.
func Open(ctx context.Context, c svc.Common) (*Deps, error) {
	reg := svc.NewRegistry()
	ops := store.NewOperationSeconds()
	reg.MustRegister(ops)
	st, err := store.Open(ctx, c.DatabaseURL, store.Config{OperationSeconds: ops})
	if err != nil {
		return nil, err
	}
	return &Deps{
		Store:     st,
		Client:    asynq.NewClient(c.Redis()),
		Inspector: asynq.NewInspector(c.Redis()),
		Redis:     c.Redis().MakeRedisClient().(redis.UniversalClient),
		Registry:  reg,
	}, nil
}

// Ready is the readiness check behind /readyz: Postgres answers a ping and
// its schema is at the migrations' head, and Redis answers a PING. Its
// error names what failed ("postgres: …", "redis: …", joined when both
// did).
func (d *Deps) Ready(ctx context.Context) error {
	var errs []error
	if err := d.Store.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("postgres: %w", err))
	} else if err := d.Store.MigrationsAtHead(ctx); err != nil {
		errs = append(errs, fmt.Errorf("postgres: %w", err))
	}
	if err := d.Client.Ping(); err != nil {
		errs = append(errs, fmt.Errorf("redis: %w", err))
	}
	return errors.Join(errs...)
}

// Close closes the inspector, the clients and the store, and returns their
// errors joined.
func (d *Deps) Close() error {
	return errors.Join(d.Inspector.Close(), d.Client.Close(), d.Redis.Close(), d.Store.Close())
}

// Run is the life of a control-plane service: it opens Deps with a context
// that ends on SIGINT or SIGTERM, calls serve with both, and closes Deps once serve returns (serve shuts down what
// it started before it returns). It returns serve's error, or Open's.
func Run(c svc.Common, log *slog.Logger, serve func(ctx context.Context, d *Deps) error) error {
	ctx, stop := svc.SignalContext()
	defer stop()
	d, err := Open(ctx, c)
	if err != nil {
		return err
	}
	defer func() {
		if err := d.Close(); err != nil {
			log.Warn("closing dependencies failed", "err", err)
		}
	}()
	return serve(ctx, d)
}
