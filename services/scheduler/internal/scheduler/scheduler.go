// Package scheduler makes every decision of Capstan: it expands runs and
// moves their workflows forward, applies finished attempts to their tasks
// (retry budgets and backoff), and — as the one leader — places PENDING tasks
// on workers with free slots. A resync re-derives everything from Postgres,
// so a lost queue message delays work but never loses it.
package scheduler

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/prometheus/client_golang/prometheus"
)

// LeaderLockID is the Postgres advisory lock the scheduling leader holds.
const LeaderLockID int64 = 0x63617073746e // "capstn"

// Config tunes the scheduler.
type Config struct {
	// Tick is the scheduling pass period when nothing kicks it. Default 1s.
	Tick time.Duration
	// ResyncPeriod is how often everything is re-derived from Postgres
	// (KubeVela's state keep). Default 5m.
	ResyncPeriod time.Duration
	// WorkerGrace: a worker silent this long gets no new work. Default 5s.
	WorkerGrace time.Duration
	// DispatchGrace: an ASSIGNED attempt older than this is re-dispatched by
	// the resync (asynq dedupes by attempt id). Default 30s.
	DispatchGrace time.Duration
	// Retry is the task retry backoff. Default full jitter 1s..5m.
	Retry domain.Backoff
	// BatchSize caps tasks placed per pass. Default 500.
	BatchSize int
	// AbortMaxRetry sizes abort tasks' asynq retries. Default 15.
	AbortMaxRetry int
	// Liveness tunes the dead-worker pass and the workers' failure backoff.
	Liveness LivenessConfig
}

func (c *Config) defaults() {
	c.Tick = cmp.Or(c.Tick, time.Second)
	c.ResyncPeriod = cmp.Or(c.ResyncPeriod, 5*time.Minute)
	c.WorkerGrace = cmp.Or(c.WorkerGrace, 5*time.Second)
	c.DispatchGrace = cmp.Or(c.DispatchGrace, 30*time.Second)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.AbortMaxRetry = cmp.Or(c.AbortMaxRetry, 15)
	c.Liveness.defaults(c.WorkerGrace)
	if c.Retry == nil {
		c.Retry = domain.FullJitter{Initial: time.Second, Max: 5 * time.Minute}
	}
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

	mu     sync.Mutex
	leader bool
}

// New builds a scheduler.
func New(st *store.Store, q *queue.Enqueuer, log *slog.Logger, reg prometheus.Registerer, cfg Config) *Scheduler {
	cfg.defaults()
	return &Scheduler{store: st, queue: q, log: log, cfg: cfg, kick: make(chan struct{}, 1), metrics: newMetrics(reg),
		live: newLiveness(reg)}
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

// lead runs passes until ctx ends or the lock's session dies.
func (s *Scheduler) lead(ctx context.Context, l *store.Leadership) {
	resync := time.NewTicker(s.cfg.ResyncPeriod)
	defer resync.Stop()
	live := time.NewTicker(s.cfg.Liveness.Tick)
	defer live.Stop()
	s.resync(ctx)
	wake := time.NewTimer(0)
	defer wake.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-resync.C:
			if !l.Held(ctx) {
				return
			}
			s.resync(ctx)
		case <-live.C:
			if !l.Held(ctx) {
				return
			}
			if !s.livenessPass(ctx) {
				continue // nothing requeued: no pass needed
			}
		case <-s.kick:
		case <-wake.C:
			if !l.Held(ctx) {
				return
			}
		}
		next := s.pass(ctx)
		if !wake.Stop() {
			select {
			case <-wake.C:
			default:
			}
		}
		wake.Reset(next)
	}
}
