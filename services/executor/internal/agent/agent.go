// Package agent connects an executor to the control plane: it registers the
// executor as a worker, heartbeats, consumes the worker's asynq queue and
// hands attempts to the supervisor, and re-registers under a new identity
// when the control plane forgets it.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
)

// Config configures an Agent.
type Config struct {
	// Name is the worker's name. Required.
	Name string
	// Address is the base URL of this executor's API as the control plane
	// reaches it, e.g. http://10.0.0.7:9001. Required.
	Address string
	// Slots is how many attempts the worker runs at once, as registered; it
	// is also the asynq concurrency. Default 4.
	Slots int
	// Labels are the worker's labels, e.g. zone=a.
	Labels map[string]string
	// Plugins are the plugins this executor runs: each is advertised as the
	// label domain.PluginLabel(name)=true, which wins over Labels (it says
	// what the executor really runs), so the scheduler places a task of an
	// optional plugin (container) only here when it is listed.
	Plugins []string
	// Resources is the capacity the worker offers (cpu millicores, memory
	// bytes); nil fields are undeclared.
	Resources api.Resources
	// Sandbox is how the executor isolates its attempts, as the worker
	// registers it ("none", or mechanisms joined with "+"). Default none.
	Sandbox string
	// HeartbeatInterval is the time between heartbeats. Default 1s.
	HeartbeatInterval time.Duration
	// PollInterval is asynq's TaskCheckInterval: an idle consumer polls its
	// queue about this often. The wake list brings new attempts at once, so
	// this bounds only the latency of what the wake list missed. Default 1s.
	PollInterval time.Duration
	// IDFile, when set, is rewritten with the worker id after each
	// registration.
	IDFile string
	// RegisterBackoff is the first delay between registration tries,
	// doubled up to 5s. Default 200ms.
	RegisterBackoff time.Duration
	// FullRetryDelay is how soon an attempt:run task is retried when every
	// slot is busy. Default 200ms.
	FullRetryDelay time.Duration
	// SweepInterval is the time between sweeps of the data directory
	// (Sweep), after the one at the start of each registration. Default
	// 10m.
	SweepInterval time.Duration
}

// Agent is one executor's link to the control plane.
type Agent struct {
	cfg    Config
	client *Client
	sup    *supervisor.Supervisor
	redis  asynq.RedisConnOpt
	log    *slog.Logger

	beatNow chan struct{} // asks for a heartbeat at once

	mu          sync.Mutex
	id          uuid.UUID // the current worker id; zero before the first registration
	draining    bool
	stopConsume context.CancelFunc // stops the current session's consumer
}

// New returns an Agent that talks to the api through client, consumes from
// redis and runs attempts with sup. Errors: an invalid config.
func New(client *Client, sup *supervisor.Supervisor, redis asynq.RedisConnOpt, cfg Config, log *slog.Logger) (*Agent, error) {
	cfg.Sandbox = cmp.Or(cfg.Sandbox, "none")
	cfg.Slots = cmp.Or(cfg.Slots, 4)
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, time.Second)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	cfg.RegisterBackoff = cmp.Or(cfg.RegisterBackoff, 200*time.Millisecond)
	cfg.FullRetryDelay = cmp.Or(cfg.FullRetryDelay, 200*time.Millisecond)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, 10*time.Minute)
	switch {
	case cfg.Name == "":
		return nil, errors.New("agent: name is required")
	case cfg.Address == "":
		return nil, errors.New("agent: address is required")
	case cfg.HeartbeatInterval < 0 || cfg.PollInterval < 0 || cfg.RegisterBackoff < 0 || cfg.FullRetryDelay < 0 ||
		cfg.SweepInterval < 0:
		return nil, errors.New("agent: intervals must not be negative")
	}
	return &Agent{cfg: cfg, client: client, sup: sup, redis: redis, log: log, beatNow: make(chan struct{}, 1)}, nil
}

// WorkerID returns the current worker id, or "" before the first
// registration.
func (a *Agent) WorkerID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.id == (uuid.UUID{}) {
		return ""
	}
	return a.id.String()
}

// Run registers the worker (retrying until the api answers), then consumes
// its queue and heartbeats until ctx ends. When the control plane forgets
// the worker it kills every attempt, registers again under a new identity
// and consumes the new queue. Run returns nil when ctx ends, having stopped
// consuming; the attempts still held are the caller's to close. Errors: the
// api rejected the registration.
func (a *Agent) Run(ctx context.Context) error {
	for {
		id, err := a.register(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		err = a.session(ctx, id)
		if ctx.Err() != nil {
			return nil
		}
		a.log.Warn("control plane forgot this worker; killing its attempts and registering again",
			"worker_id", id, "err", err)
		if err := a.sup.KillAll(ctx, workerapi.WorkerLost, "the control plane forgot this worker"); err != nil {
			a.log.Error("kill attempts failed", "err", err)
		}
		if a.isDraining() { // leaving anyway: no new identity
			<-ctx.Done()
			return nil
		}
	}
}

// Drain makes the worker take no new work: its consumer stops, and the
// control plane hears at once, and on every later heartbeat, that the worker
// is draining, so nothing new is placed on it. Heartbeats (and the stops
// they answer) go on until Run's ctx ends.
func (a *Agent) Drain() {
	a.mu.Lock()
	a.draining = true
	stop := a.stopConsume
	a.mu.Unlock()
	if stop != nil {
		stop()
	}
	select {
	case a.beatNow <- struct{}{}:
	default:
	}
}

func (a *Agent) isDraining() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.draining
}

// Deregister tells the control plane the worker is leaving (DELETE
// /v1/workers/{id}); attempts still live there become WORKER_FAILED. A
// worker it no longer knows, or that never registered, is no error.
func (a *Agent) Deregister(ctx context.Context) error {
	a.mu.Lock()
	id := a.id
	a.mu.Unlock()
	if id == (uuid.UUID{}) {
		return nil
	}
	return a.client.Deregister(ctx, id)
}

// session consumes the queue of worker id, heartbeats and sweeps the data
// directory (sweepLoop) until ctx ends or the control plane does not know
// the worker (ErrUnknownWorker).
func (a *Agent) session(ctx context.Context, id uuid.UUID) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	consumeCtx, stopConsume := context.WithCancel(ctx)
	a.mu.Lock()
	draining := a.draining
	a.stopConsume = stopConsume
	a.mu.Unlock()
	var wg sync.WaitGroup
	if !draining {
		wg.Go(func() { a.consume(consumeCtx, id) })
	}
	wg.Go(func() { a.sweepLoop(ctx, id) })
	err := a.heartbeat(ctx, id)
	cancel()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("worker %s: %w", id, err)
	}
	return nil
}
