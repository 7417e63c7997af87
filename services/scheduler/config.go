package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/capstan-run/capstan/services/scheduler/internal/firing"
	"github.com/capstan-run/capstan/services/scheduler/internal/history"
	"github.com/capstan-run/capstan/services/scheduler/internal/retention"
	"github.com/capstan-run/capstan/services/scheduler/internal/scheduler"
	"github.com/hibiken/asynq"
)

// handlerRetry is the backoff of a scheduler-queue task whose handler
// failed (Postgres unreachable, a lost race): full jitter, 100ms to 10s.
var handlerRetry = domain.FullJitter{Initial: 100 * time.Millisecond, Max: 10 * time.Second}

// config is the scheduler's environment. Durations are Go durations ("1s",
// "5m", "100ms"). Each default is its env tag's, the same as
// scheduler.Config's own (cmp.Or), which applies when a field is zero.
type config struct {
	svc.Common
	// MetricsAddr is host:port of /healthz, /readyz (Postgres and Redis
	// ping) and /metrics. Default 127.0.0.1:9091.
	MetricsAddr string `env:"CAPSTAN_METRICS_ADDR" envDefault:"127.0.0.1:9091"`
	// MetricsRefresh is how old the state and queue gauges a scrape sees
	// may be: they are counted at most once per this interval, whatever the
	// scrape rate. Default 10s.
	MetricsRefresh time.Duration `env:"CAPSTAN_METRICS_REFRESH" envDefault:"10s"`
	// Workers is the asynq concurrency on the scheduler queue: how many of
	// its tasks run at once. Default 10.
	Workers int `env:"CAPSTAN_SCHEDULER_WORKERS" envDefault:"10"`
	// Tick is the idle scheduling pass period. Default 1s.
	Tick time.Duration `env:"CAPSTAN_SCHEDULER_TICK" envDefault:"1s"`
	// ScheduleTick is the longest the schedule firing loop waits between
	// rounds when no schedule is due sooner, and how soon a schedule with
	// buffered times is looked at again. Default 1s.
	ScheduleTick time.Duration `env:"CAPSTAN_SCHEDULE_TICK" envDefault:"1s"`
	// ScheduleBatch is the most schedules one firing transaction decides.
	// Default 500.
	ScheduleBatch int `env:"CAPSTAN_SCHEDULE_BATCH" envDefault:"500"`
	// ScheduleWorkers is how many firing transactions a replica runs at
	// once. Default 4.
	ScheduleWorkers int `env:"CAPSTAN_SCHEDULE_WORKERS" envDefault:"4"`
	// ResyncPeriod is how often all work is re-derived from Postgres.
	// Default 5m.
	ResyncPeriod time.Duration `env:"CAPSTAN_RESYNC_PERIOD" envDefault:"5m"`
	// WorkerGrace: a worker silent this long is dead: its attempts become
	// WORKER_FAILED and are requeued. Silence counts only while the
	// scheduler and the api's heartbeat stamps worked (a gap of half the
	// grace restarts it), and more than half of the workers silent at once
	// wait a second grace. Set it alike on the api. Default 5s (five
	// heartbeats).
	WorkerGrace time.Duration `env:"CAPSTAN_WORKER_GRACE" envDefault:"5s"`
	// HeartbeatInterval is the executors' CAPSTAN_HEARTBEAT_INTERVAL: a
	// cache reservation lives 3 heartbeats unless its owner still works.
	// Default 1s.
	HeartbeatInterval time.Duration `env:"CAPSTAN_HEARTBEAT_INTERVAL" envDefault:"1s"`
	// WorkerBackoffTable is ARC's failure backoff: a worker with n failures
	// takes no new work until entry n after the last one, and is deleted
	// past the last entry (its executor registers again). Durations, comma
	// separated. Default 0s,5s,10s,20s,40s,80s.
	WorkerBackoffTable []time.Duration `env:"CAPSTAN_WORKER_BACKOFF_TABLE" envSeparator:"," envDefault:"0s,5s,10s,20s,40s,80s"`
	// DeadWorkerRetention is how long after it was declared dead a worker
	// stays listed (state dead) before the liveness pass deletes its row.
	// A Go duration. Default 1h.
	DeadWorkerRetention time.Duration `env:"CAPSTAN_DEAD_WORKER_RETENTION" envDefault:"1h"`
	// CacheSweepInterval is how often the leader deletes the cache entries
	// past their max_age and the reservations expired an hour ago, each
	// batch of at most 1000 rows its own transaction. A Go duration.
	// Default 1m.
	CacheSweepInterval time.Duration `env:"CAPSTAN_CACHE_SWEEP_INTERVAL" envDefault:"1m"`
	// DispatchGrace: an ASSIGNED attempt older than this is re-dispatched by
	// the resync (its message may have been lost with Redis). Default 30s.
	DispatchGrace time.Duration `env:"CAPSTAN_DISPATCH_GRACE" envDefault:"30s"`
	// MaxStepRetries is how many failed retries of an on_failure: suspend
	// step are made before the run pauses (KubeVela's). Default 10.
	MaxStepRetries int `env:"CAPSTAN_WORKFLOW_MAX_STEP_RETRIES" envDefault:"10"`
	// MaxFailedBackoff caps the backoff before a failed step's retry
	// (KubeVela's). Default 300s.
	MaxFailedBackoff time.Duration `env:"CAPSTAN_WORKFLOW_MAX_FAILED_BACKOFF" envDefault:"300s"`
	// MaxWaitBackoff caps the backoff of a step re-checking a condition: a
	// step WAITING for its target, a cache wait (KubeVela's). Default 60s.
	MaxWaitBackoff time.Duration `env:"CAPSTAN_WORKFLOW_MAX_WAIT_BACKOFF" envDefault:"60s"`
	// OnFailure is the failure policy of a step whose spec gives no
	// on_failure: fail (a failed step fails the run) or suspend (KubeVela's
	// retry-then-suspend: retried after its backoff, then PAUSED). Default
	// fail: a CI run is expected to end FAILED, not wait for a resume.
	OnFailure string `env:"CAPSTAN_WORKFLOW_ON_FAILURE" envDefault:"fail"`
	// RetryInitialDelay is the first ceiling of the full-jitter task retry
	// backoff. Default 1s.
	RetryInitialDelay time.Duration `env:"CAPSTAN_RETRY_INITIAL_DELAY" envDefault:"1s"`
	// RetryMaxDelay caps the task retry backoff. Default 5m.
	RetryMaxDelay time.Duration `env:"CAPSTAN_RETRY_MAX_DELAY" envDefault:"5m"`
	// PollInterval is asynq's TaskCheckInterval: an idle consumer polls this
	// often. Default 50ms.
	PollInterval time.Duration `env:"CAPSTAN_POLL_INTERVAL" envDefault:"50ms"`
	// DelayedTaskCheckInterval is how often asynq moves scheduled and retry
	// tasks to pending. Default 100ms (asynq's 5s would delay short
	// backoffs).
	DelayedTaskCheckInterval time.Duration `env:"CAPSTAN_DELAYED_TASK_CHECK_INTERVAL" envDefault:"100ms"`
	// AbortMaxAttempts is the abort reconciler's ABORT_MAX_ATTEMPTS (a count
	// of delivery rounds); abort and kill tasks' asynq retries are sized from
	// it (queue.AbortTaskRetries). Default 10.
	AbortMaxAttempts int `env:"ABORT_MAX_ATTEMPTS" envDefault:"10"`
	// MaxSystemFailures is how many system failures (the program cannot
	// start, the work dir cannot be made) a task is retried in place without
	// charging max_retries_failure, when its step sets no
	// max_system_failures (Flyte's MaxSystemFailures), 0 to 100. Default 3.
	MaxSystemFailures int `env:"CAPSTAN_MAX_SYSTEM_FAILURES" envDefault:"3"`
	// RetentionAfterSuccess is the server's retention of SUCCEEDED runs
	// whose spec and project say nothing about it (a ttl's
	// after_success), a Go duration. Default unset: keep them.
	RetentionAfterSuccess string `env:"CAPSTAN_RETENTION_AFTER_SUCCESS"`
	// RetentionAfterFailure is the same for runs that ended any other way
	// (after_failure). Default unset: keep them.
	RetentionAfterFailure string `env:"CAPSTAN_RETENTION_AFTER_FAILURE"`
	// RetentionAfterCompletion is the same for either outcome when its own
	// setting is unset (after_completion). Default unset: keep them.
	RetentionAfterCompletion string `env:"CAPSTAN_RETENTION_AFTER_COMPLETION"`
	// RetentionInterval is how long the reaper rests once no expired run
	// is left. Default 10s.
	RetentionInterval time.Duration `env:"CAPSTAN_RETENTION_INTERVAL" envDefault:"10s"`
	// RetentionBatch is the most expired runs one reaper transaction
	// deletes (their child runs go with them). Default 500.
	RetentionBatch int `env:"CAPSTAN_RETENTION_BATCH" envDefault:"500"`
	// ArchiveURL is the gocloud.dev blob URL of the bucket the reaper
	// writes each expired run to before it deletes it, as the api does
	// for a DELETE (set both alike). Default unset: the archive is off.
	ArchiveURL string `env:"CAPSTAN_ARCHIVE_URL"`
	// PartitionInterval is how often the leader makes the history tables'
	// coming day partitions (and drops those behind the retention horizon).
	// Default 1h.
	PartitionInterval time.Duration `env:"CAPSTAN_PARTITION_INTERVAL" envDefault:"1h"`
	// PartitionAhead is how many days after today get their partitions of
	// the history tables ahead of time, 1 to 90. Default 3.
	PartitionAhead int `env:"CAPSTAN_PARTITION_AHEAD" envDefault:"3"`
	// ControlPlaneKey is the api's CAPSTAN_CONTROL_PLANE_KEY (set it alike
	// on the api, the scheduler and the abort reconciler): every spec the
	// placement dispatches through Redis is signed under its worker's
	// dispatch key, derived from it, and an executor runs no spec that
	// does not verify. Required; at least 32 bytes. No default.
	ControlPlaneKey string `env:"CAPSTAN_CONTROL_PLANE_KEY"`
}

// validate checks the settings before anything connects, the
// control-plane key (set, not a placeholder or short: svc.CheckSecrets)
// first.
func (c config) validate() error {
	if c.ControlPlaneKey == "" {
		return errors.New("CAPSTAN_CONTROL_PLANE_KEY is required: dispatched specs are signed under keys derived from it")
	}
	if err := svc.CheckSecrets(map[string]string{"CAPSTAN_CONTROL_PLANE_KEY": c.ControlPlaneKey}); err != nil {
		return err
	}
	if c.MetricsRefresh < 0 {
		return fmt.Errorf("CAPSTAN_METRICS_REFRESH: %s is negative", c.MetricsRefresh)
	}
	if c.PartitionAhead < 1 {
		return fmt.Errorf("CAPSTAN_PARTITION_AHEAD: %d days, want 1 or more", c.PartitionAhead)
	}
	var errs []error
	for name, v := range map[string]string{"CAPSTAN_RETENTION_AFTER_SUCCESS": c.RetentionAfterSuccess,
		"CAPSTAN_RETENTION_AFTER_FAILURE": c.RetentionAfterFailure, "CAPSTAN_RETENTION_AFTER_COMPLETION": c.RetentionAfterCompletion} {
		for _, e := range (&domain.TTL{AfterCompletion: v}).Validate(name) {
			errs = append(errs, fmt.Errorf("%s: %s", name, e.Message))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return errors.Join(c.scheduler(nil).Validate(), c.firing().Validate(), c.retention().Validate(),
		c.history(history.KeepAll).Validate())
}

// retention returns the reaper's part of the config.
func (c config) retention() retention.Config {
	return retention.Config{Defaults: domain.TTL{AfterSuccess: c.RetentionAfterSuccess, AfterFailure: c.RetentionAfterFailure,
		AfterCompletion: c.RetentionAfterCompletion}, Interval: c.RetentionInterval, Batch: c.RetentionBatch}
}

// history returns the history partition keeper's part of the config;
// dropBefore is its horizon (history.Config.DropBefore).
func (c config) history(dropBefore func(time.Time) (time.Time, bool)) history.Config {
	return history.Config{Interval: c.PartitionInterval, Ahead: c.PartitionAhead, DropBefore: dropBefore}
}

// firing returns the schedule firing loop's part of the config.
func (c config) firing() firing.Config {
	return firing.Config{Tick: c.ScheduleTick, BatchSize: c.ScheduleBatch, Workers: c.ScheduleWorkers,
		AbortMaxRetry: queue.AbortTaskRetries(c.AbortMaxAttempts)}
}

// scheduler returns the scheduler's part of the config; queues is the
// asynq inspector the liveness pass reads worker queues with.
func (c config) scheduler(queues *asynq.Inspector) scheduler.Config {
	return scheduler.Config{
		Tick: c.Tick, WorkerGrace: c.WorkerGrace,
		Resync:        scheduler.ResyncConfig{Period: c.ResyncPeriod, DispatchGrace: c.DispatchGrace},
		Retry:         domain.FullJitter{Initial: c.RetryInitialDelay, Max: c.RetryMaxDelay},
		AbortMaxRetry: queue.AbortTaskRetries(c.AbortMaxAttempts), MaxSystemFailures: &c.MaxSystemFailures,
		Liveness: scheduler.LivenessConfig{Backoff: domain.Table(c.WorkerBackoffTable),
			DeadRetention: c.DeadWorkerRetention, Queues: queues},
		Workflow: scheduler.WorkflowConfig{MaxStepRetries: c.MaxStepRetries, FailedBackoffCap: c.MaxFailedBackoff,
			WaitBackoffCap: c.MaxWaitBackoff, OnFailure: c.OnFailure},
		Cache:           scheduler.CacheConfig{ReservationTTL: 3 * c.HeartbeatInterval, SweepInterval: c.CacheSweepInterval},
		ControlPlaneKey: workerkey.New(c.ControlPlaneKey),
	}
}

// consumer returns the asynq server config of the scheduler queue's
// consumer; failed tasks retry after handlerRetry.
func (c config) consumer(ctx context.Context, log *slog.Logger) asynq.Config {
	return asynq.Config{
		Concurrency: c.Workers, Queues: map[string]int{queue.Scheduler: 1},
		TaskCheckInterval: c.PollInterval, DelayedTaskCheckInterval: c.DelayedTaskCheckInterval,
		ShutdownTimeout: 5 * time.Second, Logger: svc.AsynqLogger(log), LogLevel: svc.AsynqLevel(ctx, log),
		RetryDelayFunc: func(n int, _ error, _ *asynq.Task) time.Duration {
			return handlerRetry.Delay(n)
		},
	}
}
