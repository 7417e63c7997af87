package reconciler

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/workerkey"
)

// Config tunes the reconciler. A zero field takes its default; a negative
// one is an error. The abort defaults (Workers, MaxAttempts, InitialDelay,
// MaxDelay) are Flyte's AbortReconcilerConfig.
type Config struct {
	// Queue is the asynq queue consumed and resynced into. Default
	// queue.Abort ("abort"); tests use one queue each.
	Queue string
	// SchedulerQueue receives task:evaluate for a killed attempt found gone
	// whose task still counts on it. Default queue.Scheduler.
	SchedulerQueue string
	// Workers is how many aborts are processed at once (the asynq server's
	// Concurrency; Flyte's Workers). Default 5.
	Workers int
	// MaxAttempts is how many deliveries of one abort are tried before it is
	// cleared with outcome needs_intervention. Default 10.
	MaxAttempts int
	// InitialDelay is the first backoff ceiling, and the delay before a retry
	// whose attempt was not counted (Postgres was unreachable). Default 1s.
	InitialDelay time.Duration
	// MaxDelay caps every backoff ceiling. Default 5m.
	MaxDelay time.Duration
	// ResyncPeriod is how often every pending abort is re-enqueued from
	// Postgres (KubeVela's "state keep"). Default 5m.
	ResyncPeriod time.Duration
	// CallTimeout bounds each executor call. Default 10s.
	CallTimeout time.Duration
	// CallConcurrency bounds the concurrent executor calls of one abort (one
	// per live attempt). Each call returns only once its process is gone
	// (SIGTERM, then SIGKILL after the executor's kill grace), so this, not
	// the kill itself, paces a wide abort. Default 32.
	CallConcurrency int
	// WorkerGrace: a worker whose last heartbeat is older than this is dead,
	// and its attempts count as already terminated. Default 5s.
	WorkerGrace time.Duration
	// DelayedTaskCheckInterval is how often asynq moves due retry tasks to
	// pending; asynq's own default (5s) would make short backoffs lag.
	// Default 100ms.
	DelayedTaskCheckInterval time.Duration
	// TaskCheckInterval is how long an idle asynq consumer waits before
	// polling its queue again (it sleeps TaskCheckInterval/2 plus up to
	// TaskCheckInterval). Default 100ms: about 10 cheap polls a second.
	TaskCheckInterval time.Duration
	// ControlPlaneKey is CAPSTAN_CONTROL_PLANE_KEY, the api's: a call to a
	// worker's executor carries that worker's executor credential, derived
	// from it (package workerkey). Zero fails every call. No default.
	ControlPlaneKey workerkey.Key
}

// Defaults: the first four are Flyte's AbortReconcilerConfig, ResyncPeriod
// is KubeVela's state-keep interval, the rest are Capstan's.
const (
	DefaultWorkers                  = 5
	DefaultMaxAttempts              = 10
	DefaultInitialDelay             = time.Second
	DefaultMaxDelay                 = 5 * time.Minute
	DefaultResyncPeriod             = 5 * time.Minute
	DefaultCallTimeout              = 10 * time.Second
	DefaultCallConcurrency          = 32
	DefaultWorkerGrace              = 5 * time.Second
	DefaultDelayedTaskCheckInterval = 100 * time.Millisecond
	DefaultTaskCheckInterval        = 100 * time.Millisecond
)

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.Queue = cmp.Or(c.Queue, queue.Abort)
	c.SchedulerQueue = cmp.Or(c.SchedulerQueue, queue.Scheduler)
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.InitialDelay = cmp.Or(c.InitialDelay, DefaultInitialDelay)
	c.MaxDelay = cmp.Or(c.MaxDelay, DefaultMaxDelay)
	c.ResyncPeriod = cmp.Or(c.ResyncPeriod, DefaultResyncPeriod)
	c.CallTimeout = cmp.Or(c.CallTimeout, DefaultCallTimeout)
	c.CallConcurrency = cmp.Or(c.CallConcurrency, DefaultCallConcurrency)
	c.WorkerGrace = cmp.Or(c.WorkerGrace, DefaultWorkerGrace)
	c.DelayedTaskCheckInterval = cmp.Or(c.DelayedTaskCheckInterval, DefaultDelayedTaskCheckInterval)
	c.TaskCheckInterval = cmp.Or(c.TaskCheckInterval, DefaultTaskCheckInterval)
	return c
}

// validate checks a config that went through withDefaults.
func (c Config) validate() error {
	var errs []error
	positive := func(name string, ok bool) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	positive("Workers", c.Workers > 0)
	positive("MaxAttempts", c.MaxAttempts > 0)
	positive("InitialDelay", c.InitialDelay > 0)
	positive("MaxDelay", c.MaxDelay > 0)
	positive("ResyncPeriod", c.ResyncPeriod > 0)
	positive("CallTimeout", c.CallTimeout > 0)
	positive("CallConcurrency", c.CallConcurrency > 0)
	positive("WorkerGrace", c.WorkerGrace > 0)
	positive("DelayedTaskCheckInterval", c.DelayedTaskCheckInterval > 0)
	positive("TaskCheckInterval", c.TaskCheckInterval > 0)
	if c.MaxDelay < c.InitialDelay {
		errs = append(errs, fmt.Errorf("MaxDelay (%s) must not be below InitialDelay (%s)", c.MaxDelay, c.InitialDelay))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("reconciler config: %w", err)
	}
	return nil
}

// Validate returns what New would reject in c once its defaults are
// applied, or nil; a main calls it to report a bad environment before it
// connects to anything.
func (c Config) Validate() error { return c.withDefaults().validate() }

// TaskMaxRetry is the asynq MaxRetry every action:abort and attempt:kill
// task must carry: queue.AbortTaskRetries of MaxAttempts, so that asynq
// never archives an abort before Postgres's abort_attempt_count decides.
// (Expected retries do not even count toward it: see isFailure.)
func (c Config) TaskMaxRetry() int { return queue.AbortTaskRetries(c.withDefaults().MaxAttempts) }

// shutdownTimeout is how long Stop lets in-flight aborts finish: one
// executor call plus slack for the Postgres writes around it.
func (c Config) shutdownTimeout() time.Duration { return c.CallTimeout + 5*time.Second }
