package supervisor

import (
	"context"
	"go.opentelemetry.io/otel/trace"
	"sync"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
)

// stopReason is why an attempt was stopped: the report's cause and error.
type stopReason struct {
	cause  workerapi.AttemptReportCause
	reason string
}

// attempt is one held attempt. Its goroutine (Supervisor.run) owns its
// process; other goroutines only mark it stopped.
type attempt struct {
	spec workerapi.AttemptSpec
	// ctx bounds its BUILDING and RUNNING reports; cancelled when stopped.
	ctx    context.Context
	cancel context.CancelFunc

	stopping chan struct{} // closed when stopped
	exited   chan struct{} // closed when no process runs for it any more
	stuck    chan struct{} // closed when the plugin's Abort failed; killErr says why
	killErr  error
	exitOnce sync.Once
	logs     *logShipper    // ships the output while it runs; nil ships nothing
	answers  sync.WaitGroup // waits for the answer to its RUNNING report (running)
	// runningWithFinal: its RUNNING report is still to be sent, ahead of
	// the final one and in the same batch (light). Its goroutine's alone.
	runningWithFinal bool
	// unconfirmed: its spec came with its dispatch, not from a read of the
	// attempt, so only its BUILDING report's answer confirms that it may
	// run (StartDispatched); dropped: that answer was lost, so it never
	// started and sends no final report. Its goroutine's alone.
	unconfirmed, dropped bool
	// finalized: the plugin's Finalize succeeded (finalizer). Its
	// goroutine's alone.
	finalized bool

	stuckOnce   sync.Once
	mu          sync.Mutex
	state       api.TaskState
	stopped     *stopReason
	processDone bool
}

// finalizer is p's Finalize, recording in a when it succeeds.
func (a *attempt) finalizer(p plugin.Plugin) func(context.Context, *plugin.Task) error {
	return func(ctx context.Context, t *plugin.Task) error {
		err := p.Finalize(ctx, t)
		if err == nil {
			a.finalized = true
		}
		return err
	}
}

func newAttempt(ctx context.Context, spec workerapi.AttemptSpec) *attempt {
	ctx, cancel := context.WithCancel(ctx)
	return &attempt{spec: spec, ctx: ctx, cancel: cancel, state: api.TaskStateBUILDING,
		stopping: make(chan struct{}), exited: make(chan struct{}), stuck: make(chan struct{})}
}

func (a *attempt) currentState() api.TaskState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

func (a *attempt) setState(st api.TaskState) {
	a.mu.Lock()
	a.state = st
	a.mu.Unlock()
}

// markStopped records r (the first reason wins) unless the process already
// exited, and wakes the attempt's goroutine. It returns false when the
// process had already exited.
func (a *attempt) markStopped(r stopReason) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.processDone {
		return false
	}
	if a.stopped == nil {
		a.stopped = &r
		close(a.stopping)
		a.cancel()
	}
	return true
}

// markStuck records the first failure of the plugin's Abort and wakes the
// Abort calls waiting for the attempt (its cleanup goes on retrying).
func (a *attempt) markStuck(err error) {
	a.stuckOnce.Do(func() {
		a.killErr = err
		close(a.stuck)
	})
}

// finish records that the work ended by itself, unless the attempt was
// stopped first: then it returns the stop's reason. After it, a stop finds
// the work done (markStopped answers false).
func (a *attempt) finish() *stopReason {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped == nil {
		a.processDone = true
	}
	return a.stopped
}

func (a *attempt) markExited() {
	a.mu.Lock()
	a.processDone = true
	a.mu.Unlock()
}

func (a *attempt) stopReason() *stopReason {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopped
}

// run is the attempt's goroutine: it runs the attempt, sends the final
// report and forgets it.
func (s *Supervisor) run(a *attempt) {
	defer s.wg.Done()
	defer s.forget(a)
	defer a.answers.Wait() // after cancel: an answer still awaited ends with a.ctx
	defer a.cancel()
	final := s.execute(a)
	a.logs.close() // the last output is stored before the final report
	if a.dropped {
		s.log.Warn("attempt not started: the control plane did not confirm it; its resync dispatches it again",
			"attempt_id", a.spec.Id)
		return
	}
	a.setState(final.State)
	log := s.log.With("attempt_id", a.spec.Id, "state", final.State)
	reps := []workerapi.AttemptReport{final}
	if a.runningWithFinal {
		reps = []workerapi.AttemptReport{{State: api.TaskStateRUNNING}, final}
	}
	// The final report outlives the attempt's context, but not its trace.
	ctx := trace.ContextWithSpanContext(s.ctx, trace.SpanContextFromContext(a.ctx))
	if _, err := s.rep.Report(ctx, a.spec.Id, reps...); err != nil {
		log.Error("final report lost", "err", err)
		return
	}
	log.Info("attempt finished")
}
