package supervisor

import (
	"context"
	"fmt"
	"sync"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
)

// stopReason is why an attempt was stopped: the report's cause and error.
type stopReason struct {
	cause  api.AttemptReportCause
	reason string
}

// attempt is one held attempt. Its goroutine (Supervisor.run) owns its
// process; other goroutines only mark it stopped.
type attempt struct {
	spec api.AttemptSpec
	// ctx bounds its BUILDING and RUNNING reports; cancelled when stopped.
	ctx    context.Context
	cancel context.CancelFunc

	stopping chan struct{} // closed when stopped
	exited   chan struct{} // closed when no process runs for it any more
	stuck    chan struct{} // closed when the kill failed; killErr says why
	killErr  error
	exitOnce sync.Once
	logs     *logShipper // ships the output while it runs; nil ships nothing

	mu          sync.Mutex
	state       api.TaskState
	proc        *runner.Process
	stopped     *stopReason
	processDone bool
}

func newAttempt(ctx context.Context, spec api.AttemptSpec) *attempt {
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

// startProcess starts spec unless the attempt was stopped first (then it
// returns the reason and no process).
func (a *attempt) startProcess(spec runner.Spec) (*runner.Process, *stopReason, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped != nil {
		return nil, a.stopped, nil
	}
	p, err := runner.Start(spec)
	if err != nil {
		return nil, nil, err
	}
	a.proc, a.state = p, api.TaskStateRUNNING
	return p, nil, nil
}

// run is the attempt's goroutine: it runs the attempt, sends the final
// report and forgets it.
func (s *Supervisor) run(a *attempt) {
	defer s.wg.Done()
	defer s.forget(a)
	defer a.cancel()
	final := s.execute(a)
	a.logs.close() // the last output is stored before the final report
	a.setState(final.State)
	log := s.log.With("attempt_id", a.spec.Id, "state", final.State)
	if _, err := s.rep.Report(s.ctx, a.spec.Id, final); err != nil {
		log.Error("final report lost", "err", err)
		return
	}
	log.Info("attempt finished")
}

// execute reports BUILDING, prepares the directories, starts the process,
// reports RUNNING and waits for the process, killing it when stopped. It
// returns the final report. A noop attempt skips all but the RUNNING report.
func (s *Supervisor) execute(a *attempt) api.AttemptReport {
	defer s.exited(a)
	if a.spec.Plugin == domain.PluginNoop {
		return s.noop(a)
	}
	if !s.report(a, api.AttemptReport{State: api.TaskStateBUILDING}) {
		a.markStopped(stopReason{api.Aborted, "the control plane stopped the attempt"})
	}
	if r := a.stopReason(); r != nil {
		return killed(*r, nil)
	}
	if a.spec.Plugin != domain.PluginShell {
		return systemFailure(fmt.Errorf("unknown plugin %q", a.spec.Plugin))
	}
	if err := checkIONames(a.spec); err != nil {
		return userFailure(err)
	}
	dirs, err := s.prepare(a.spec)
	if err != nil {
		return systemFailure(err)
	}
	// The work directory goes with the attempt, once its process is gone
	// (its output is in the final report); the run's shared one stays.
	defer s.removeWorkDir(dirs.work)
	proc, stopped, err := a.startProcess(runner.Spec{Command: a.spec.Command, Dir: dirs.work,
		Env: environ(a.spec, dirs), LogLimit: s.cfg.LogLimit, OnOutput: a.logs.write})
	switch {
	case stopped != nil:
		return killed(*stopped, nil)
	case err != nil:
		return systemFailure(err)
	}
	pid := proc.Pid()
	s.log.Info("attempt started", "attempt_id", a.spec.Id, "pid", pid)
	if !s.report(a, api.AttemptReport{State: api.TaskStateRUNNING, Pid: &pid}) {
		a.markStopped(stopReason{api.Aborted, "the control plane stopped the attempt"})
	}
	s.await(a, proc)
	s.exited(a)
	res := proc.Wait()
	if r := a.stopReason(); r != nil {
		return killed(*r, &res)
	}
	return withOutputs(exitReport(res), dirs.outputs, declaredOutputs(a.spec))
}

// noop runs an attempt of the noop plugin: no directory and no process. It
// reports RUNNING and, unless the attempt was stopped first, returns
// SUCCEEDED with exit code 0 and every declared output empty.
func (s *Supervisor) noop(a *attempt) api.AttemptReport {
	if r := a.stopReason(); r != nil {
		return killed(*r, nil)
	}
	a.setState(api.TaskStateRUNNING)
	if !s.report(a, api.AttemptReport{State: api.TaskStateRUNNING}) {
		a.markStopped(stopReason{api.Aborted, "the control plane stopped the attempt"})
	}
	if r := a.stopReason(); r != nil {
		return killed(*r, nil)
	}
	if err := checkIONames(a.spec); err != nil {
		return userFailure(err)
	}
	return api.AttemptReport{State: api.TaskStateSUCCEEDED, ExitCode: ptr(0), Outputs: noopOutputs(declaredOutputs(a.spec))}
}

// await waits for proc to exit, killing its group if the attempt is stopped
// first.
func (s *Supervisor) await(a *attempt, proc *runner.Process) {
	select {
	case <-proc.Exited():
		return
	case <-a.stopping:
	}
	if err := proc.Kill(s.cfg.KillGrace); err != nil {
		s.log.Error("kill failed", "attempt_id", a.spec.Id, "pid", proc.Pid(), "err", err)
		a.killErr = err
		close(a.stuck)
		<-proc.Exited()
	}
}

// report sends a progress report within a's context. It returns false only
// when the control plane answered that the attempt must stop: a lost
// progress report is no reason to kill a process.
func (s *Supervisor) report(a *attempt, rep api.AttemptReport) bool {
	proceed, err := s.rep.Report(a.ctx, a.spec.Id, rep)
	if err != nil {
		if a.ctx.Err() == nil {
			s.log.Warn("report lost", "attempt_id", a.spec.Id, "state", rep.State, "err", err)
		}
		return true
	}
	return proceed
}
