// Package supervisor holds the attempts an executor runs: it reserves their
// slots, validates their plugin specs, prepares their directories, drives
// their plugins (Handle, Abort, Finalize), reports their states to the
// control plane and stops them on request.
package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
)

// Sentinels callers branch on.
var (
	// ErrFull: every slot is taken; try again shortly.
	ErrFull = errors.New("all slots are busy")
	// ErrClosed: the supervisor is shutting down and takes no new attempt.
	ErrClosed = errors.New("supervisor is closed")
	// ErrNotHeld: this executor holds no such attempt.
	ErrNotHeld = errors.New("attempt not held by this executor")
)

// Reporter tells the control plane facts about an attempt. Report sends
// reps in order, together when it batches, and returns proceed=false when
// the attempt must stop. It may retry; an error means a report was lost.
// Submit queues a report and returns at once, wait giving Report's answer:
// a report of an attempt submitted or made after it reaches the control
// plane after it.
type Reporter interface {
	Report(ctx context.Context, id int64, reps ...workerapi.AttemptReport) (proceed bool, err error)
	Submit(ctx context.Context, id int64, rep workerapi.AttemptReport) (wait func() (proceed bool, err error))
}

// Config configures a Supervisor.
type Config struct {
	// Slots is how many attempts may hold a process at once. Default 4; 1 to 1024.
	Slots int
	// DataDir holds the work directories, attempts/<id>/, and the run
	// directories, runs/<project>/<domain>/<run>/. Default ./.data/executor;
	// made absolute.
	DataDir string
	// KillGrace is how long an aborted attempt's work has between SIGTERM
	// and SIGKILL when its spec gives no kill_grace_ms (a control plane
	// older than the field). Default domain.DefaultKillGrace (10s).
	KillGrace time.Duration
	// Plugins are the plugins the executor runs, by name. Default
	// plugin.NewDefault without a container runtime (shell, http, noop).
	Plugins *plugin.Registry
	// LogLimit is how many bytes of stdout and of stderr are kept per attempt:
	// the last ones. Default 64 KiB.
	LogLimit int
	// RunAs, when set and without a Sandbox, is the user and group
	// attempts' processes run as (CAPSTAN_EXECUTOR_RUN_AS); their work and
	// run directories are made theirs. Default nil: the executor's own user.
	RunAs *runner.Credential
	// Sandbox, when set, gives each attempt a user, namespaces and limits
	// of its own (see sandbox.Sandbox); the data directory and every
	// directory above it must then be searchable by any user (o+x). Default
	// nil: none.
	Sandbox *sandbox.Sandbox
	// PassEnv names variables of the executor's environment that tasks get,
	// besides PATH, HOME, LANG and TZ. Default none.
	PassEnv []string
	// MaxProcs bounds a container's processes (--pids-limit); the
	// Sandbox's bounds a host process's. Default sandbox.DefaultMaxProcs.
	MaxProcs int
}

// Held is an attempt this executor holds and its state, as a heartbeat
// reports it.
type Held struct {
	ID    int64
	State api.TaskState
}

// Supervisor runs attempts. It is safe for concurrent use.
type Supervisor struct {
	cfg Config
	rep Reporter
	log *slog.Logger
	// ctx bounds every report; Close cancels it when its deadline passes.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // one goroutine per held attempt

	mu     sync.Mutex
	held   map[int64]*attempt
	busy   int // attempts that hold a slot: their process has not exited
	closed bool
	// removing holds the directories being removed (removeUnused), each
	// with a channel closed once its removal is done.
	removing map[string]chan struct{}
}

// New returns a Supervisor that reports through rep. Errors: an invalid
// config.
func New(rep Reporter, cfg Config, log *slog.Logger) (*Supervisor, error) {
	cfg.Slots = cmp.Or(cfg.Slots, 4)
	cfg.DataDir = cmp.Or(cfg.DataDir, "./.data/executor")
	cfg.KillGrace = cmp.Or(cfg.KillGrace, domain.DefaultKillGrace)
	if cfg.Plugins == nil {
		cfg.Plugins = plugin.NewDefault(plugin.Config{})
	}
	cfg.LogLimit = cmp.Or(cfg.LogLimit, 64<<10)
	cfg.MaxProcs = cmp.Or(cfg.MaxProcs, sandbox.DefaultMaxProcs)
	switch {
	case cfg.Slots < 1 || cfg.Slots > 1024:
		return nil, fmt.Errorf("slots must be 1 to 1024, got %d", cfg.Slots)
	case cfg.KillGrace < 0:
		return nil, fmt.Errorf("kill grace must not be negative, got %s", cfg.KillGrace)
	case cfg.LogLimit < 0:
		return nil, fmt.Errorf("log limit must not be negative, got %d", cfg.LogLimit)
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	cfg.DataDir = dir
	if cfg.Sandbox != nil {
		if err := prepareSandboxed(dir); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Supervisor{cfg: cfg, rep: rep, log: log, ctx: ctx, cancel: cancel, held: map[int64]*attempt{},
		removing: map[string]chan struct{}{}}, nil
}

// DataDir is the data directory, absolute.
func (s *Supervisor) DataDir() string { return s.cfg.DataDir }

// Start takes the attempt and starts running it in the background; it
// returns at once. Starting an attempt it already holds does nothing.
// Errors: ErrFull when every slot is taken, ErrClosed after Close.
func (s *Supervisor) Start(spec workerapi.AttemptSpec) error {
	return s.StartInTrace(context.Background(), spec)
}

// StartInTrace is Start for an attempt whose reports continue the trace of
// parent's span (the attempt:run task's): the attempt takes parent's span
// context, not its deadline or cancellation.
func (s *Supervisor) StartInTrace(parent context.Context, spec workerapi.AttemptSpec) error {
	return s.start(parent, spec, false)
}

// StartDispatched is StartInTrace for an attempt whose spec came with its
// dispatch (the placement pass's message) instead of a read of the
// attempt, which also said the attempt may run: its BUILDING report's
// answer says so instead, before its work starts, and an attempt whose
// answer is lost does not start (building). A WorkDirless plugin's
// attempt, which has no BUILDING and no work, runs as it would.
func (s *Supervisor) StartDispatched(parent context.Context, spec workerapi.AttemptSpec) error {
	return s.start(parent, spec, true)
}

func (s *Supervisor) start(parent context.Context, spec workerapi.AttemptSpec, unconfirmed bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.held[spec.Id] != nil:
		return nil
	case s.busy >= s.cfg.Slots:
		return ErrFull
	}
	a := newAttempt(trace.ContextWithSpanContext(s.ctx, trace.SpanContextFromContext(parent)), spec)
	a.unconfirmed = unconfirmed
	a.logs = s.newLogShipper(spec.Id)
	s.held[spec.Id] = a
	s.busy++
	s.wg.Add(1)
	go s.run(a)
	return nil
}

// Ready answers an orchestrator's readiness probe: nil while the supervisor
// takes new attempts, ErrClosed once Drain or Close began (the executor is
// leaving; the attempts it still holds can be aborted all the same).
func (s *Supervisor) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// Holds reports whether the attempt is held, from its start until its final
// report was sent.
func (s *Supervisor) Holds(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[id] != nil
}

// Held lists the attempts held, by id.
func (s *Supervisor) Held() []Held {
	s.mu.Lock()
	out := make([]Held, 0, len(s.held))
	for id, a := range s.held {
		out = append(out, Held{ID: id, State: a.currentState()})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Held) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Stop asks for the attempt to be stopped, with cause and reason, without
// waiting; the final report (KILLED, PREEMPTED or WORKER_FAILED, by cause,
// with its cleanup steps) follows once its plugin's Abort and Finalize are
// done. It returns false when the attempt is not held or its work had
// already ended.
func (s *Supervisor) Stop(id int64, cause workerapi.AttemptReportCause, reason string) bool {
	a := s.get(id)
	return a != nil && s.stop(a, stopReason{cause, reason})
}

// Abort stops the attempt (its plugin's Abort: for a process, SIGTERM, the
// kill grace, SIGKILL to its group), then finalizes it, and returns once
// both are done: killed is true, or false when its work had already ended.
// Errors: ErrNotHeld; the plugin's Abort's first error (runner.ErrStuck:
// the attempt goes on retrying it); ctx's error.
func (s *Supervisor) Abort(ctx context.Context, id int64, cause workerapi.AttemptReportCause, reason string) (killed bool, err error) {
	a := s.get(id)
	if a == nil {
		return false, ErrNotHeld
	}
	if !s.stop(a, stopReason{cause, reason}) {
		return false, nil
	}
	select {
	case <-a.exited:
		return true, nil
	case <-a.stuck:
		return false, a.killErr
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// KillAll aborts every held attempt with cause and reason, concurrently, and
// returns once all their processes are gone or ctx ends.
func (s *Supervisor) KillAll(ctx context.Context, cause workerapi.AttemptReportCause, reason string) error {
	s.mu.Lock()
	ids := make([]int64, 0, len(s.held))
	for id := range s.held {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			if _, err := s.Abort(ctx, id, cause, reason); err != nil && !errors.Is(err, ErrNotHeld) {
				errs[i] = fmt.Errorf("attempt %d: %w", id, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Drain takes no new attempt (Start answers ErrClosed) and waits until
// every held attempt has finished and sent its final report, or ctx ends
// (then it returns ctx's error and the attempts keep running: Close kills
// them).
func (s *Supervisor) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait() // no Add after closed: Start checks it under mu
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close takes no new attempt, kills every held one (cause worker_lost: they
// are reported WORKER_FAILED, so the scheduler runs them elsewhere) and
// waits for their final reports until ctx ends; then it abandons the reports
// still being retried.
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.KillAll(ctx, workerapi.WorkerLost, "the executor is shutting down")
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, fmt.Errorf("final reports: %w", ctx.Err()))
	}
	s.cancel()
	return err
}

func (s *Supervisor) get(id int64) *attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[id]
}

// stop marks a stopped; its goroutine then kills its process. It returns
// false when a's process had already exited.
func (s *Supervisor) stop(a *attempt, r stopReason) bool {
	return a.markStopped(r)
}

// exited records that a's work is stopped and finalized (or never started):
// it frees a's slot and wakes the Abort calls waiting for it.
func (s *Supervisor) exited(a *attempt) {
	a.exitOnce.Do(func() {
		a.markExited()
		s.mu.Lock()
		s.busy--
		s.mu.Unlock()
		close(a.exited)
	})
}

// forget drops a once its final report was sent or given up.
func (s *Supervisor) forget(a *attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[a.spec.Id] == a {
		delete(s.held, a.spec.Id)
	}
}
