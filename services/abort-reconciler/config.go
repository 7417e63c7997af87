package main

import (
	"cmp"
	"errors"
	"time"

	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/capstan-run/capstan/services/abort-reconciler/internal/reconciler"
)

// defaultMetricsAddr is where /healthz, /readyz and /metrics listen unless
// CAPSTAN_METRICS_ADDR says otherwise.
const defaultMetricsAddr = "127.0.0.1:9092"

// config is the service's environment. Unset or zero values take the
// defaults below (applied with cmp.Or, here and in reconciler.Config);
// durations are Go durations ("1s", "5m", "100ms").
type config struct {
	svc.Common
	// MetricsAddr is host:port of /healthz, /readyz (Postgres and Redis
	// ping) and /metrics. Default 127.0.0.1:9092.
	MetricsAddr string `env:"CAPSTAN_METRICS_ADDR"`
	// DelayedTaskCheckInterval is how often asynq moves due retries to
	// pending. Default 100ms (asynq's own 5s would make backoffs lag).
	DelayedTaskCheckInterval time.Duration `env:"CAPSTAN_DELAYED_TASK_CHECK_INTERVAL"`
	// TaskCheckInterval is how long an idle consumer waits before polling
	// again (asynq's TaskCheckInterval). Default 100ms.
	TaskCheckInterval time.Duration `env:"CAPSTAN_TASK_CHECK_INTERVAL"`
	// WorkerGrace: a worker silent for longer, or not alive, is dead and its
	// attempts count as already terminated. Default 5s.
	WorkerGrace time.Duration `env:"CAPSTAN_WORKER_GRACE"`
	// Workers is how many aborts are processed at once. Default 5.
	Workers int `env:"ABORT_WORKERS"`
	// MaxAttempts is how many delivery rounds an abort gets before it is
	// cleared as needs_intervention. Default 10.
	MaxAttempts int `env:"ABORT_MAX_ATTEMPTS"`
	// InitialDelay is the first backoff ceiling. Default 1s.
	InitialDelay time.Duration `env:"ABORT_INITIAL_DELAY"`
	// MaxDelay caps the backoff. Default 5m.
	MaxDelay time.Duration `env:"ABORT_MAX_DELAY"`
	// ResyncPeriod is how often pending aborts are re-enqueued from
	// Postgres. Default 5m.
	ResyncPeriod time.Duration `env:"ABORT_RESYNC_PERIOD"`
	// CallTimeout bounds each executor call. Default 10s.
	CallTimeout time.Duration `env:"ABORT_CALL_TIMEOUT"`
	// CallConcurrency bounds the concurrent executor calls of one abort.
	// Default 32.
	CallConcurrency int `env:"ABORT_CALL_CONCURRENCY"`
	// ControlPlaneKey is the api's CAPSTAN_CONTROL_PLANE_KEY (set it alike
	// on the api, the scheduler and the reconciler): each call to a
	// worker's executor carries that worker's own executor credential,
	// derived from it. Required; at least 32 bytes. No default.
	ControlPlaneKey string `env:"CAPSTAN_CONTROL_PLANE_KEY"`
}

// metricsAddr returns MetricsAddr or its default.
func (c config) metricsAddr() string { return cmp.Or(c.MetricsAddr, defaultMetricsAddr) }

// validate checks what the env tags cannot: the reconciler's ranges, and
// that the control-plane key is set and not a placeholder or short
// (svc.CheckSecrets).
func (c config) validate() error {
	var errs []error
	if c.ControlPlaneKey == "" {
		errs = append(errs, errors.New("CAPSTAN_CONTROL_PLANE_KEY is required: calls to executors carry credentials derived from it"))
	}
	return errors.Join(append(errs, c.reconciler().Validate(),
		svc.CheckSecrets(map[string]string{"CAPSTAN_CONTROL_PLANE_KEY": c.ControlPlaneKey}))...)
}

// reconciler returns the reconciler's part of the config.
func (c config) reconciler() reconciler.Config {
	return reconciler.Config{
		Workers:                  c.Workers,
		MaxAttempts:              c.MaxAttempts,
		InitialDelay:             c.InitialDelay,
		MaxDelay:                 c.MaxDelay,
		ResyncPeriod:             c.ResyncPeriod,
		CallTimeout:              c.CallTimeout,
		CallConcurrency:          c.CallConcurrency,
		WorkerGrace:              c.WorkerGrace,
		DelayedTaskCheckInterval: c.DelayedTaskCheckInterval,
		TaskCheckInterval:        c.TaskCheckInterval,
		ControlPlaneKey:          workerkey.New(c.ControlPlaneKey),
	}
}
