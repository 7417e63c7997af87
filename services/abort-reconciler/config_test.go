package main

import (
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/services/abort-reconciler/internal/reconciler"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	cfg, err := env.ParseAsWithOptions[config](env.Options{Environment: map[string]string{
		"CAPSTAN_DATABASE_URL":                "postgres://x@db/capstan",
		"CAPSTAN_REDIS_ADDR":                  "redis:6379",
		"CAPSTAN_REDIS_DB":                    "3",
		"CAPSTAN_METRICS_ADDR":                "0.0.0.0:9092",
		"CAPSTAN_DELAYED_TASK_CHECK_INTERVAL": "50ms",
		"CAPSTAN_TASK_CHECK_INTERVAL":         "20ms",
		"CAPSTAN_WORKER_GRACE":                "30s",
		"ABORT_WORKERS":                       "7",
		"ABORT_MAX_ATTEMPTS":                  "3",
		"ABORT_INITIAL_DELAY":                 "2s",
		"ABORT_MAX_DELAY":                     "1m",
		"ABORT_RESYNC_PERIOD":                 "30s",
		"ABORT_CALL_TIMEOUT":                  "4s",
		"ABORT_CALL_CONCURRENCY":              "2",
	}})
	require.NoError(t, err)
	require.Equal(t, "postgres://x@db/capstan", cfg.DatabaseURL)
	require.Equal(t, asynq.RedisClientOpt{Addr: "redis:6379", DB: 3}, cfg.Redis())
	require.Equal(t, "0.0.0.0:9092", cfg.metricsAddr())
	require.Equal(t, reconciler.Config{Workers: 7, MaxAttempts: 3, InitialDelay: 2 * time.Second, MaxDelay: time.Minute,
		ResyncPeriod: 30 * time.Second, CallTimeout: 4 * time.Second, CallConcurrency: 2, WorkerGrace: 30 * time.Second,
		DelayedTaskCheckInterval: 50 * time.Millisecond, TaskCheckInterval: 20 * time.Millisecond}, cfg.reconciler())
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := env.ParseAsWithOptions[config](env.Options{Environment: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9092", cfg.metricsAddr())
	require.Equal(t, "127.0.0.1:56379", cfg.RedisAddr)
	require.Equal(t, "info", cfg.LogLevel)
	require.Equal(t, reconciler.Config{}, cfg.reconciler(), "zero: the reconciler applies its defaults")
}

func TestConfigRejectsBadValues(t *testing.T) {
	t.Parallel()
	for k, field := range map[string]string{"ABORT_INITIAL_DELAY": "InitialDelay", "ABORT_WORKERS": "Workers"} {
		_, err := env.ParseAsWithOptions[config](env.Options{Environment: map[string]string{k: "soon"}})
		require.ErrorContains(t, err, field)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	key := "CAPSTAN_CONTROL_PLANE_KEY"
	cfg, err := env.ParseAsWithOptions[config](env.Options{Environment: map[string]string{
		key: "0123456789abcdefghijklmnopqrstuvwxyz"}})
	require.NoError(t, err)
	require.NoError(t, cfg.validate(), "the defaults and a key are valid")
	require.False(t, cfg.reconciler().ControlPlaneKey.IsZero())
	cfg, err = env.ParseAsWithOptions[config](env.Options{Environment: map[string]string{}})
	require.NoError(t, err)
	require.ErrorContains(t, cfg.validate(), "CAPSTAN_CONTROL_PLANE_KEY is required")
	cfg, err = env.ParseAsWithOptions[config](env.Options{Environment: map[string]string{
		"ABORT_INITIAL_DELAY": "1m", "ABORT_MAX_DELAY": "1s", "ABORT_WORKERS": "-1"}})
	require.NoError(t, err, "the env tags accept any number")
	require.ErrorContains(t, cfg.validate(), "MaxDelay")
	require.ErrorContains(t, cfg.validate(), "Workers")
	cfg, err = env.ParseAsWithOptions[config](env.Options{Environment: map[string]string{key: "CHANGE_ME"}})
	require.NoError(t, err)
	require.ErrorContains(t, cfg.validate(), "CAPSTAN_CONTROL_PLANE_KEY is a placeholder")
}
