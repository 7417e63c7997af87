// Package reconciler drives every abort and kill to completion (Flyte's
// AbortReconciler, on asynq and Postgres): an asynq consumer of action:abort (an
// action and everything under it) and attempt:kill (one attempt: preemption,
// an attempt's timeout) counts each delivery round in Postgres, asks the
// executors holding the live attempts to kill them, clears the request when
// all are gone, and otherwise retries the same task with full-jitter backoff
// until MaxAttempts. A resync loop re-enqueues every pending request from
// Postgres on start and every ResyncPeriod, so losing Redis loses nothing.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// Store is the data the reconciler uses: the aborts repository's, the
// abort request an action carries (GetAction) and the live child runs an
// abort reaches (LiveChildRuns). StoreOf builds it from a *store.Store.
type Store interface {
	AbortAction(ctx context.Context, key domain.ActionKey, reason, cause string) (store.Action, error)
	LiveChildRuns(ctx context.Context, key domain.ActionKey) ([]domain.RunKey, error)
	MarkAbortAttempt(ctx context.Context, key domain.ActionKey) (int, error)
	GetAction(ctx context.Context, key domain.ActionKey) (store.ActionDetail, error)
	LiveAttemptsUnder(ctx context.Context, key domain.ActionKey) ([]store.LiveAttempt, error)
	MarkAttemptsGone(ctx context.Context, ids []int64, cause string) ([]int64, error)
	ClearAbortRequest(ctx context.Context, key domain.ActionKey, outcome string) error
	ListPendingAborts(ctx context.Context) ([]domain.ActionKey, error)

	MarkKillAttempt(ctx context.Context, attemptID int64) (int, error)
	GetKillTarget(ctx context.Context, attemptID int64) (store.KillTarget, error)
	MarkKillGone(ctx context.Context, attemptID int64, cause string) (bool, error)
	ClearKillRequest(ctx context.Context, attemptID int64, outcome string) error
	ListPendingKills(ctx context.Context) ([]int64, error)
}

// storeOf is the Store of a *store.Store.
type storeOf struct {
	store.Aborts
	store.Actions
	runs store.Runs
}

func (s storeOf) LiveChildRuns(ctx context.Context, key domain.ActionKey) ([]domain.RunKey, error) {
	return s.runs.LiveChildRuns(ctx, key)
}

var _ Store = storeOf{}

// StoreOf returns the Store the reconciler uses of st.
func StoreOf(st *store.Store) Store { return storeOf{st.Aborts(), st.Actions(), st.Runs()} }

// Deps are the reconciler's collaborators.
type Deps struct {
	// Store is Postgres. Required.
	Store Store
	// Redis is where the asynq consumer, the resync's client and the
	// inspector connect. Required.
	Redis asynq.RedisConnOpt
	// Log receives the reconciler's logs. Default slog.Default().
	Log *slog.Logger
	// Registry receives the metrics. Default a private registry.
	Registry prometheus.Registerer
	// HTTPClient calls the executors; per-call timeouts come from
	// Config.CallTimeout. Default a client with its own transport.
	HTTPClient *http.Client
	// Now is the clock that judges worker heartbeats. Default time.Now.
	Now func() time.Time
	// Rand draws the jitter: uniform in [0, n). Default math/rand/v2.
	Rand func(n int64) int64
}

// Reconciler delivers aborts. Build it with New, run it with Start, end it
// with Stop.
type Reconciler struct {
	cfg       Config
	store     Store
	redis     asynq.RedisConnOpt
	client    *asynq.Client
	enq       *queue.Enqueuer
	inspector *asynq.Inspector
	log       *slog.Logger
	metrics   *metrics
	http      *http.Client
	now       func() time.Time
	backoff   domain.FullJitter
	due       dueTimes

	started atomic.Bool
	server  *asynq.Server
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New validates cfg (after defaults) and builds a reconciler. It connects to
// nothing until Start.
func New(deps Deps, cfg Config) (*Reconciler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.Redis == nil {
		return nil, errors.New("reconciler: Store and Redis are required")
	}
	r := &Reconciler{cfg: cfg, store: deps.Store, redis: deps.Redis,
		log: deps.Log, http: deps.HTTPClient, now: deps.Now,
		backoff: domain.FullJitter{Initial: cfg.InitialDelay, Max: cfg.MaxDelay, Rand: deps.Rand}}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.http == nil {
		// Abort calls carry the trace context to the executor.
		r.http = &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport.(*http.Transport).Clone())}
	}
	if r.now == nil {
		r.now = time.Now
	}
	reg := deps.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("reconciler metrics: %w", err)
	}
	r.metrics = m
	r.inspector = asynq.NewInspector(deps.Redis)
	r.client = asynq.NewClient(deps.Redis)
	r.enq = queue.NewEnqueuer(r.client, r.log)
	return r, nil
}

// Config returns the effective configuration, defaults applied.
func (r *Reconciler) Config() Config { return r.cfg }

// Start starts the asynq consumers first, then runs the startup scan (a
// resync pass: as in Flyte's AbortReconciler, the workers start before the
// scan, so that what it pushes is taken at once), then the resync loop. It
// returns once the scan is done; a scan that fails is logged and left to
// the loop's next pass. ctx bounds the scan and the loop; Stop ends
// everything. A reconciler starts at most once.
func (r *Reconciler) Start(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("reconciler: already started")
	}
	r.server = asynq.NewServer(r.redis, asynq.Config{
		Concurrency:              r.cfg.Workers,
		Queues:                   map[string]int{r.cfg.Queue: 1},
		RetryDelayFunc:           retryDelay(r.backoff),
		IsFailure:                isFailure,
		DelayedTaskCheckInterval: r.cfg.DelayedTaskCheckInterval,
		TaskCheckInterval:        r.cfg.TaskCheckInterval,
		ShutdownTimeout:          r.cfg.shutdownTimeout(),
		Logger:                   svc.AsynqLogger(r.log),
		LogLevel:                 svc.AsynqLevel(ctx, r.log),
	})
	mux := asynq.NewServeMux()
	mux.Use(obs.TaskMiddleware)
	mux.HandleFunc(queue.TypeActionAbort, r.HandleActionAbort)
	mux.HandleFunc(queue.TypeAttemptKill, r.HandleAttemptKill)
	if err := r.server.Start(mux); err != nil {
		return fmt.Errorf("start consuming queue %s: %w", r.cfg.Queue, err)
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.resync(ctx)
	r.wg.Go(func() { r.resyncLoop(ctx) })
	r.log.Info("abort reconciler started", "queue", r.cfg.Queue, "workers", r.cfg.Workers,
		"max_attempts", r.cfg.MaxAttempts, "initial_delay", r.cfg.InitialDelay, "max_delay", r.cfg.MaxDelay,
		"resync_period", r.cfg.ResyncPeriod)
	return nil
}

// Stop ends the resync loop, stops consuming, lets in-flight aborts finish
// (up to CallTimeout+5s, after which asynq puts them back in the queue), and
// closes connections. Stop on a reconciler never started only closes.
func (r *Reconciler) Stop() {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	if r.server != nil {
		r.server.Shutdown()
	}
	if err := r.inspector.Close(); err != nil {
		r.log.Warn("close asynq inspector", "err", err)
	}
	if err := r.client.Close(); err != nil {
		r.log.Warn("close asynq client", "err", err)
	}
	r.http.CloseIdleConnections()
}

// resyncLoop runs resync every ResyncPeriod until ctx ends.
func (r *Reconciler) resyncLoop(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.ResyncPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		r.resync(ctx)
	}
}

// resync runs one resync pass (runOnce) and logs what it did, after
// forgetting the retries due long ago (dueTimes.prune).
func (r *Reconciler) resync(ctx context.Context) {
	r.due.prune(time.Now().Add(-time.Minute))
	res, err := r.runOnce(ctx)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		r.log.Error("abort resync failed", "err", err, "pending", res.Pending, "enqueued", res.Enqueued,
			"failed", res.Failed)
	case res.Enqueued+res.Revived > 0:
		r.log.Info("abort resync enqueued", "pending", res.Pending, "enqueued", res.Enqueued,
			"duplicates", res.Duplicates, "revived", res.Revived)
	default:
		r.log.Debug("abort resync done", "pending", res.Pending, "duplicates", res.Duplicates)
	}
}
