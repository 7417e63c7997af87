package main

import (
	"maps"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/stretchr/testify/require"
)

// parse reads vars as the environment, with a control-plane key unless
// vars name one.
func parse(t *testing.T, vars map[string]string) config {
	t.Helper()
	vars = maps.Clone(vars)
	if _, ok := vars["CAPSTAN_CONTROL_PLANE_KEY"]; !ok {
		vars["CAPSTAN_CONTROL_PLANE_KEY"] = "0123456789abcdefghijklmnopqrstuvwxyz"
	}
	cfg, err := env.ParseAsWithOptions[config](env.Options{Environment: vars}) // never the process's environment
	require.NoError(t, err)
	return cfg
}

// TestControlPlaneKey: the scheduler signs dispatched specs under keys
// derived from CAPSTAN_CONTROL_PLANE_KEY, which it requires, and refuses a
// placeholder.
func TestControlPlaneKey(t *testing.T) {
	t.Parallel()
	require.False(t, parse(t, map[string]string{}).scheduler(nil).ControlPlaneKey.IsZero())
	require.ErrorContains(t, parse(t, map[string]string{"CAPSTAN_CONTROL_PLANE_KEY": ""}).validate(),
		"CAPSTAN_CONTROL_PLANE_KEY is required")
	require.ErrorContains(t, parse(t, map[string]string{"CAPSTAN_CONTROL_PLANE_KEY": "change-me"}).validate(),
		"CAPSTAN_CONTROL_PLANE_KEY is a placeholder")
}

// TestDeadWorkerRetention: CAPSTAN_DEAD_WORKER_RETENTION (a Go duration,
// default 1h) is the liveness pass's DeadRetention; a negative one is
// refused before anything connects.
func TestDeadWorkerRetention(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		vars map[string]string
		want time.Duration
	}{
		{"unset: 1h", map[string]string{}, time.Hour},
		{"set", map[string]string{"CAPSTAN_DEAD_WORKER_RETENTION": "90s"}, 90 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := parse(t, tt.vars)
			require.NoError(t, cfg.validate())
			require.Equal(t, tt.want, cfg.scheduler(nil).Liveness.DeadRetention)
		})
	}
	negative := parse(t, map[string]string{"CAPSTAN_DEAD_WORKER_RETENTION": "-1m"})
	require.ErrorContains(t, negative.validate(), "Liveness.DeadRetention: -1m0s is negative")
}

// TestScheduleSettings: CAPSTAN_SCHEDULE_TICK, _BATCH and _WORKERS are the
// firing loop's Tick (default 1s), BatchSize (500) and Workers (4); a
// negative one is refused before anything connects.
func TestScheduleSettings(t *testing.T) {
	t.Parallel()
	def := parse(t, map[string]string{})
	require.NoError(t, def.validate())
	require.Equal(t, time.Second, def.firing().Tick)
	require.Equal(t, 500, def.firing().BatchSize)
	require.Equal(t, 4, def.firing().Workers)
	set := parse(t, map[string]string{"CAPSTAN_SCHEDULE_TICK": "50ms", "CAPSTAN_SCHEDULE_BATCH": "20"})
	require.Equal(t, 50*time.Millisecond, set.firing().Tick)
	require.Equal(t, 20, set.firing().BatchSize)
	negative := parse(t, map[string]string{"CAPSTAN_SCHEDULE_WORKERS": "-1"})
	require.ErrorContains(t, negative.validate(), "Workers: -1 is negative")
}

// TestRetentionSettings: CAPSTAN_RETENTION_AFTER_* are the reaper's
// defaults (unset: keep), _INTERVAL (10s) and _BATCH (500) its pace; a
// value that is not a duration is refused, naming its variable.
func TestRetentionSettings(t *testing.T) {
	t.Parallel()
	def := parse(t, map[string]string{})
	require.NoError(t, def.validate())
	require.Zero(t, def.retention().Defaults)
	require.Equal(t, 10*time.Second, def.retention().Interval)
	require.Equal(t, 500, def.retention().Batch)
	set := parse(t, map[string]string{"CAPSTAN_RETENTION_AFTER_SUCCESS": "24h", "CAPSTAN_RETENTION_AFTER_COMPLETION": "720h"})
	require.NoError(t, set.validate())
	require.Equal(t, "24h", set.retention().Defaults.AfterSuccess)
	require.Equal(t, "720h", set.retention().Defaults.AfterCompletion)
	bad := parse(t, map[string]string{"CAPSTAN_RETENTION_AFTER_FAILURE": "30d"})
	require.ErrorContains(t, bad.validate(), "CAPSTAN_RETENTION_AFTER_FAILURE: must be a duration")
	negative := parse(t, map[string]string{"CAPSTAN_RETENTION_BATCH": "-1"})
	require.ErrorContains(t, negative.validate(), "batch: -1 is negative")
}

// TestCacheSweepInterval: CAPSTAN_CACHE_SWEEP_INTERVAL (a Go duration,
// default 1m) is the cache sweep's SweepInterval; a negative one is refused
// before anything connects.
func TestCacheSweepInterval(t *testing.T) {
	t.Parallel()
	def := parse(t, map[string]string{})
	require.NoError(t, def.validate())
	require.Equal(t, time.Minute, def.scheduler(nil).Cache.SweepInterval)
	set := parse(t, map[string]string{"CAPSTAN_CACHE_SWEEP_INTERVAL": "15s"})
	require.Equal(t, 15*time.Second, set.scheduler(nil).Cache.SweepInterval)
	negative := parse(t, map[string]string{"CAPSTAN_CACHE_SWEEP_INTERVAL": "-1s"})
	require.ErrorContains(t, negative.validate(), "Cache.SweepInterval: -1s is negative")
}

// TestPartitionSettings: CAPSTAN_PARTITION_INTERVAL and _AHEAD are the
// history keeper's Interval (default 1h) and Ahead (3 days); an Ahead below
// 1 or above 90, or a negative interval, is refused before anything
// connects.
func TestPartitionSettings(t *testing.T) {
	t.Parallel()
	def := parse(t, map[string]string{})
	require.NoError(t, def.validate())
	require.Equal(t, time.Hour, def.history(nil).Interval)
	require.Equal(t, 3, def.history(nil).Ahead)
	set := parse(t, map[string]string{"CAPSTAN_PARTITION_INTERVAL": "10m", "CAPSTAN_PARTITION_AHEAD": "7"})
	require.NoError(t, set.validate())
	require.Equal(t, 10*time.Minute, set.history(nil).Interval)
	require.Equal(t, 7, set.history(nil).Ahead)
	for v, msg := range map[string]string{"0": "CAPSTAN_PARTITION_AHEAD: 0 days", "91": "Ahead: 91 days"} {
		bad := parse(t, map[string]string{"CAPSTAN_PARTITION_AHEAD": v})
		require.ErrorContains(t, bad.validate(), msg)
	}
	negative := parse(t, map[string]string{"CAPSTAN_PARTITION_INTERVAL": "-1m"})
	require.ErrorContains(t, negative.validate(), "Interval: -1m0s is negative")
}

// TestDefaultsFromAnEmptyEnvironment: with nothing set, the scheduler runs
// the reference systems' values: ARC's failedRunnerBackoff table
// (CAPSTAN_WORKER_BACKOFF_TABLE 0s,5s,10s,20s,40s,80s), KubeVela's 10 step
// retries, its backoff caps (60 s waiting, 300 s failed) and its 5-minute
// state keep (CAPSTAN_RESYNC_PERIOD), Flyte's 3 system failures
// (CAPSTAN_MAX_SYSTEM_FAILURES), and the fail policy for steps that say
// none (CAPSTAN_WORKFLOW_ON_FAILURE).
func TestDefaultsFromAnEmptyEnvironment(t *testing.T) {
	t.Parallel()
	cfg := parse(t, map[string]string{})
	require.NoError(t, cfg.validate())
	s := cfg.scheduler(nil)
	require.Equal(t, domain.Table{0, 5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second,
		80 * time.Second}, s.Liveness.Backoff, "ARC's failedRunnerBackoff")
	require.Equal(t, domain.ARCTable, s.Liveness.Backoff)
	require.Equal(t, 10, s.Workflow.MaxStepRetries, "KubeVela's --max-workflow-step-error-retry-times")
	require.Equal(t, 300*time.Second, s.Workflow.FailedBackoffCap, "KubeVela's --max-workflow-failed-backoff-time")
	require.Equal(t, 60*time.Second, s.Workflow.WaitBackoffCap, "KubeVela's --max-workflow-wait-backoff-time")
	require.Equal(t, domain.OnFailureFail, s.Workflow.OnFailure, "a CI run is expected to end FAILED")
	require.Equal(t, 5*time.Minute, s.Resync.Period, "KubeVela's state keep, --application-re-sync-period")
	require.NotNil(t, s.MaxSystemFailures)
	require.Equal(t, 3, *s.MaxSystemFailures, "Flyte's DefaultMaxSystemFailures")
	require.Equal(t, domain.FullJitter{Initial: time.Second, Max: 5 * time.Minute}, s.Retry)

	set := parse(t, map[string]string{"CAPSTAN_WORKFLOW_ON_FAILURE": "suspend"})
	require.NoError(t, set.validate())
	require.Equal(t, domain.OnFailureSuspend, set.scheduler(nil).Workflow.OnFailure)
	bad := parse(t, map[string]string{"CAPSTAN_WORKFLOW_ON_FAILURE": "retry"})
	require.ErrorContains(t, bad.validate(), `Workflow.OnFailure: "retry" is not "fail" or "suspend"`)
}
