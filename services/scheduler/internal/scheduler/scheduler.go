// Package scheduler makes every decision of Capstan: it expands runs and
// moves their workflows forward, applies finished attempts to their tasks
// (retry budgets and backoff), and — as the one leader — places PENDING tasks
// on workers with free slots. A resync re-derives everything from Postgres,
// so a lost queue message delays work but never loses it.
package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// LeaderLockID is the Postgres advisory lock the scheduling leader holds.
const LeaderLockID int64 = 0x63617073746e // "capstn"

// Config tunes the scheduler; each leader pass has its own part.
type Config struct {
	// Tick is the scheduling pass period when nothing kicks it. Default 1s.
	Tick time.Duration
	// WorkerGrace: a worker silent this long gets no new work, and the
	// liveness pass declares it dead. Default 5s.
	WorkerGrace time.Duration
	// Retry is the task retry backoff. Default full jitter 1s..5m.
	Retry domain.Backoff
	// AbortMaxRetry sizes abort tasks' asynq retries. Default
	// queue.AbortTaskRetries(10), for the reconciler's default MaxAttempts.
	AbortMaxRetry int
	// Placement tunes the placement pass.
	Placement PlacementConfig
	// Liveness tunes the dead-worker pass and the workers' failure backoff.
	Liveness LivenessConfig
	// Resync tunes the resync (KubeVela's state keep).
	Resync ResyncConfig
	// Workflow tunes KubeVela's step retries.
	Workflow WorkflowConfig
	// MaxSystemFailures is how many system failures a task is retried in
	// place when its step sets no max_system_failures (Flyte's
	// MaxSystemFailures), 0 to 100. Default (nil) 3.
	MaxSystemFailures *int
	// Cache tunes the catalog's reservations and its sweep.
	Cache CacheConfig
	// BatchWorkers is how many start transactions (each of up to 64 new
	// runs, see startRuns) a replica makes at once. Default 4.
	BatchWorkers int
	// Now is the clock of evaluations and advances: a retry's, a wait's and
	// a step's backoff are due from its time. Default time.Now.
	Now func() time.Time
	// ControlPlaneKey is CAPSTAN_CONTROL_PLANE_KEY, the api's: the specs a
	// placement dispatches are signed under each worker's dispatch key,
	// derived from it (package workerkey). Zero: dispatches carry ids
	// alone, and each executor reads its attempts from the api. No
	// default.
	ControlPlaneKey workerkey.Key
}

// Validate reports the settings that cannot work: a negative duration,
// count or worker backoff entry, a cache sweep batch over 1000. Zero means
// the default.
func (c Config) Validate() error {
	var errs []error
	for name, d := range map[string]time.Duration{"Tick": c.Tick, "WorkerGrace": c.WorkerGrace,
		"Resync.Period": c.Resync.Period, "Resync.DispatchGrace": c.Resync.DispatchGrace,
		"Liveness.DeadRetention": c.Liveness.DeadRetention, "Workflow.FailedBackoffCap": c.Workflow.FailedBackoffCap,
		"Workflow.WaitBackoffCap": c.Workflow.WaitBackoffCap, "Cache.ReservationTTL": c.Cache.ReservationTTL,
		"Cache.SweepInterval": c.Cache.SweepInterval, "Cache.ReservationRetention": c.Cache.ReservationRetention,
		"Liveness.Outage": c.Liveness.Outage} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: %s is negative", name, d))
		}
	}
	for name, n := range map[string]int{"Placement.BatchSize": c.Placement.BatchSize,
		"Placement.KeysPerProject": c.Placement.KeysPerProject,
		"Workflow.MaxStepRetries":  c.Workflow.MaxStepRetries, "AbortMaxRetry": c.AbortMaxRetry,
		"BatchWorkers": c.BatchWorkers, "Cache.SweepBatch": c.Cache.SweepBatch} {
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s: %d is negative", name, n))
		}
	}
	if p := c.Workflow.OnFailure; p != "" && p != domain.OnFailureFail && p != domain.OnFailureSuspend {
		errs = append(errs, fmt.Errorf("Workflow.OnFailure: %q is not %q or %q", p, domain.OnFailureFail,
			domain.OnFailureSuspend))
	}
	if c.Cache.SweepBatch > 1000 {
		errs = append(errs, fmt.Errorf("Cache.SweepBatch: %d is more than 1000", c.Cache.SweepBatch))
	}
	if m := c.MaxSystemFailures; m != nil && (*m < 0 || *m > domain.MaxRetriesLimit) {
		errs = append(errs, fmt.Errorf("MaxSystemFailures: %d is not between 0 and %d", *m, domain.MaxRetriesLimit))
	}
	for i, d := range c.Liveness.Backoff {
		if d < 0 {
			errs = append(errs, fmt.Errorf("Liveness.Backoff[%d]: %s is negative", i, d))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	c.Tick = cmp.Or(c.Tick, time.Second)
	c.WorkerGrace = cmp.Or(c.WorkerGrace, 5*time.Second)
	c.AbortMaxRetry = cmp.Or(c.AbortMaxRetry, queue.AbortTaskRetries(10))
	c.BatchWorkers = cmp.Or(c.BatchWorkers, 4)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxSystemFailures == nil {
		c.MaxSystemFailures = new(int)
		*c.MaxSystemFailures = domain.DefaultMaxSystemFailures
	}
	if c.Retry == nil {
		c.Retry = domain.FullJitter{Initial: time.Second, Max: 5 * time.Minute}
	}
	c.Placement.defaults()
	c.Liveness.defaults(c.WorkerGrace)
	c.Resync.defaults()
	c.Workflow.defaults()
	c.Cache.defaults()
}

// Scheduler is the scheduler's state.
type Scheduler struct {
	store   *store.Store
	queue   *queue.Enqueuer
	log     *slog.Logger
	cfg     Config
	kick    chan struct{}
	metrics *metrics
	live    *liveness
	starts  startGate

	// placedAll is set when the leader's last pass ended with no task
	// left to place (none waiting, the batch not full), cleared when a pass
	// starts: an evaluation that only freed a slot kicks no pass then.
	placedAll atomic.Bool

	mu     sync.Mutex
	leader bool
	// expiredAt is when the leader's last expiry pass began (lead's
	// goroutine alone uses it).
	expiredAt time.Time
}

// New builds a scheduler.
func New(st *store.Store, q *queue.Enqueuer, log *slog.Logger, reg prometheus.Registerer, cfg Config) *Scheduler {
	cfg.defaults()
	return &Scheduler{store: st, queue: q, log: log, cfg: cfg, kick: make(chan struct{}, 1), metrics: newMetrics(reg),
		live: newLiveness(reg), starts: startGate{tokens: make(chan struct{}, cfg.BatchWorkers)}}
}

// now is the time of an evaluation or an advance, in UTC (Config.Now).
func (s *Scheduler) now() time.Time { return s.cfg.Now().UTC() }

// Register adds the scheduler's queue handlers to mux: any replica applies
// evaluations and progression.
func (s *Scheduler) Register(mux *asynq.ServeMux) {
	mux.Use(obs.TaskMiddleware)
	mux.HandleFunc(queue.TypeRunStart, s.handleRunStart)
	mux.HandleFunc(queue.TypeRunsStart, s.handleRuns)
	mux.HandleFunc(queue.TypeTasksEvaluate, s.handleEvaluations)
	mux.HandleFunc(queue.TypeRunAdvance, s.handleRun)
	mux.HandleFunc(queue.TypeTaskEvaluate, s.handleEvaluate)
}

// Kick asks the leader for a scheduling pass soon.
func (s *Scheduler) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// IsLeader reports whether this replica holds leadership.
func (s *Scheduler) IsLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader
}

func (s *Scheduler) setLeader(v bool) {
	s.mu.Lock()
	s.leader = v
	s.mu.Unlock()
}

// Run campaigns for leadership and, while leader, runs scheduling passes and
// resyncs, until ctx ends.
func (s *Scheduler) Run(ctx context.Context) {
	for ctx.Err() == nil {
		l, err := s.store.TryLeadership(ctx, LeaderLockID)
		if err != nil {
			s.log.Warn("leadership attempt failed", "err", err)
		}
		if l == nil {
			select {
			case <-ctx.Done():
			case <-time.After(s.cfg.Tick):
			}
			continue
		}
		s.log.Info("became scheduling leader")
		s.setLeader(true)
		s.lead(ctx, l)
		s.setLeader(false)
		l.Release()
		s.log.Info("left scheduling leadership")
	}
}

// lead runs the leader's passes until ctx ends or the lock's session dies,
// in a fixed order: the resync first; then on every wake (a kick, the tick,
// the end of a backoff) placement, after the expiry pass unless a kick
// started it within Placement.ExpiryEvery of the last one (pass); a
// Resync.Period after the end of the previous resync the resync (so a
// resync longer than the period leaves placement its turn); every lineSweepTicks ticks the sweep of the
// concurrency lines (sweepLines). The dead-worker pass and the cache sweep
// run beside them, each in a goroutine of its own ended before lead
// returns (livenessEvery, sweepCacheEvery): a long placement pass delays
// neither, and in particular never reads as an outage of the control
// plane to fenced liveness, which restarts every worker's grace after a
// gap between two of its passes (domain.GraceOrigin).
func (s *Scheduler) lead(ctx context.Context, l *store.Leadership) {
	sideCtx, stopSide := context.WithCancel(ctx)
	var side sync.WaitGroup
	side.Go(func() { s.sweepCacheEvery(sideCtx) })
	side.Go(func() { s.livenessEvery(sideCtx) })
	defer side.Wait()
	defer stopSide()
	resync := time.NewTimer(s.cfg.Resync.Period)
	defer resync.Stop()
	lines := time.NewTicker(lineSweepTicks * s.cfg.Tick)
	defer lines.Stop()
	s.resync(ctx)
	wake := time.NewTimer(0)
	defer wake.Stop()
	for {
		timed := true
		select {
		case <-ctx.Done():
			return
		case <-resync.C:
			if !l.Held(ctx) {
				return
			}
			s.resync(ctx)
			resync.Reset(s.cfg.Resync.Period)
		case <-lines.C:
			s.sweepLines(ctx)
			continue
		case <-s.kick:
			timed = false
		case <-wake.C:
			if !l.Held(ctx) {
				return
			}
		}
		wake.Reset(s.pass(ctx, timed))
	}
}
