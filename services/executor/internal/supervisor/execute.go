package supervisor

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
)

// collectTimeout bounds the last observation of a stopped attempt's work,
// which collects its exit and output once Abort stopped it.
const collectTimeout = 5 * time.Second

// finalizeTimeout bounds the one Finalize of an attempt that was not
// stopped.
const finalizeTimeout = time.Minute

// execute runs an attempt the way Flyte's executor (TaskActionReconciler)
// reconciles a task: it validates the plugin spec and resolves the plugin
// first (an attempt that can never run fails permanently, with nothing to
// finalize), reports BUILDING, prepares the directories, then drives the
// plugin's Handle until the work ends or the attempt is stopped. It returns
// the final report. A WorkDirless plugin (noop) skips BUILDING and the
// directories.
func (s *Supervisor) execute(a *attempt) workerapi.AttemptReport {
	defer s.exited(a)
	p, t, failed := s.resolve(a.spec)
	if t != nil {
		t.OnOutput = a.logs.write
		t.OnPending = func(reason string) { s.pending(a, reason) }
	}
	if failed != nil {
		return *failed
	}
	if r := a.stopReason(); r != nil {
		return killed(*r, nil)
	}
	if _, ok := p.(plugin.WorkDirless); ok {
		return s.light(a, p, t)
	}
	if !s.building(a) {
		a.markStopped(stopReason{workerapi.Aborted, "the control plane stopped the attempt"})
	}
	if a.dropped {
		return workerapi.AttemptReport{}
	}
	if r := a.stopReason(); r != nil {
		return killed(*r, nil)
	}
	if err := checkIONames(a.spec); err != nil {
		return userFailure(codeInvalidOutputs, err)
	}
	dirs, box, err := s.prepare(a.spec)
	if err != nil {
		return systemFailure(plugin.CodeWorkDirFailed, err)
	}
	// The work directory goes with the attempt, once its work is stopped
	// and finalized (its output is in the final report); the run's shared
	// one stays. Its user goes back to the sandbox after that (deferred
	// first, so run last): a later attempt of the same uid never finds it.
	if box != nil {
		defer s.leave(a, box)
	}
	defer s.removeWorkDir(dirs.work)
	if box != nil {
		if a.spec.Plugin == domain.PluginContainer {
			if err := box.MarkContainer(); err != nil {
				return systemFailure(plugin.CodeWorkDirFailed, err)
			}
		}
	}
	s.withDirs(t, a.spec, dirs, box)
	return s.drive(a, p, t)
}

// leave gives a's user and cgroup back to the sandbox, its processes gone:
// a container's user is known free of it only once its Finalize removed it.
func (s *Supervisor) leave(a *attempt, box *sandbox.Attempt) {
	gone := a.spec.Plugin != domain.PluginContainer || a.finalized
	if err := box.Close(gone); err != nil {
		s.log.Warn("attempt's cgroup not removed", "attempt_id", a.spec.Id, "err", err)
	}
}

// light runs an attempt of a WorkDirless plugin: it is RUNNING at once and,
// unless the attempt was stopped first, returns what the plugin's Handle
// answers. Its RUNNING report goes with the final one, in the same batch
// (one request and one transaction at the control plane, not two), unless
// the work goes on after Handle's first answer: then drive reports it.
func (s *Supervisor) light(a *attempt, p plugin.Plugin, t *plugin.Task) workerapi.AttemptReport {
	a.setState(api.TaskStateRUNNING)
	a.runningWithFinal = true
	if r := a.stopReason(); r != nil {
		return killed(*r, nil)
	}
	if err := checkIONames(a.spec); err != nil {
		return userFailure(codeInvalidOutputs, err)
	}
	return s.drive(a, p, t)
}

// drive calls Handle to start the work and then to observe it, reporting
// RUNNING once it runs, until it ends or the attempt is stopped. A stopped
// attempt is aborted and finalized (see stopped); a system failure resets
// the plugin (see systemFailed); work that ended is finalized and reported.
// Once the work ended, a stop no longer changes the outcome.
func (s *Supervisor) drive(a *attempt, p plugin.Plugin, t *plugin.Task) workerapi.AttemptReport {
	tr, err := p.Handle(a.ctx, t)
	running := false
	for err == nil && !tr.Ended() && a.stopReason() == nil {
		if !running {
			running = true
			s.running(a, tr.Pid)
			continue // the RUNNING report may have stopped it
		}
		tr, err = p.Handle(a.ctx, t)
	}
	if r := a.finish(); r != nil {
		return s.stopped(a, p, t, *r)
	}
	if err != nil {
		return s.systemFailed(a, p, t, err)
	}
	s.finalize(a, p, t)
	return withTransition(tr, t, s.outputsOwner(t))
}

// outputsOwner is the uid t's output files must belong to: a sandboxed
// attempt's own; -1 (any) without a sandbox.
func (s *Supervisor) outputsOwner(t *plugin.Task) int {
	if s.cfg.Sandbox == nil || t.RunAs == nil {
		return -1
	}
	return int(t.RunAs.UID)
}

// running reports RUNNING, with the work's process group when it has one,
// without waiting for the answer: the work goes on meanwhile (its final
// report follows RUNNING to the control plane, in the same batch when it
// ends first), and an answer that the attempt must stop stops it then.
func (s *Supervisor) running(a *attempt, pid int) {
	a.setState(api.TaskStateRUNNING)
	a.runningWithFinal = false
	rep := workerapi.AttemptReport{State: api.TaskStateRUNNING}
	if pid > 0 {
		rep.Pid = &pid
		s.log.Info("attempt started", "attempt_id", a.spec.Id, "pid", pid)
	}
	wait := s.rep.Submit(a.ctx, a.spec.Id, rep)
	a.answers.Go(func() {
		if !s.proceed(a, rep, wait) {
			a.markStopped(stopReason{workerapi.Aborted, "the control plane stopped the attempt"})
		}
	})
}

// pending reports BUILDING again with why the work waits to be placed (the
// task's pending_reason), without waiting for the answer, as running
// does: an answer that the attempt must stop stops it then.
func (s *Supervisor) pending(a *attempt, reason string) {
	rep := workerapi.AttemptReport{State: api.TaskStateBUILDING, PendingReason: &reason}
	wait := s.rep.Submit(a.ctx, a.spec.Id, rep)
	a.answers.Go(func() {
		if !s.proceed(a, rep, wait) {
			a.markStopped(stopReason{workerapi.Aborted, "the control plane stopped the attempt"})
		}
	})
}

// stopped finishes a stopped attempt as Flyte's executor
// (TaskActionReconciler) handles an aborted task (handleAbortAndFinalize):
// the plugin's Abort stops the work, then its Finalize cleans up, each
// retried until it succeeds; the final report carries both steps. What the
// work wrote until then is collected into the report.
func (s *Supervisor) stopped(a *attempt, p plugin.Plugin, t *plugin.Task, r stopReason) workerapi.AttemptReport {
	cleanup := []workerapi.CleanupStep{
		s.retry(a, workerapi.Abort, p.Abort, t),
		s.retry(a, workerapi.Finalize, a.finalizer(p), t),
	}
	var last *plugin.Transition
	if t.State != nil { // the work started: collect its exit and output
		ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
		tr, err := p.Handle(ctx, t)
		cancel()
		if err == nil && tr.Ended() {
			last = &tr
		}
	}
	rep := killed(r, last)
	rep.Cleanup = &cleanup
	return rep
}

// systemFailed reports a system failure after resetting the plugin: its
// Abort, as Flyte's executor (TaskActionReconciler) does on a system error
// (resetPluginResource), then its Finalize, once each (their failures are
// logged), and its state is cleared.
func (s *Supervisor) systemFailed(a *attempt, p plugin.Plugin, t *plugin.Task, err error) workerapi.AttemptReport {
	log := s.log.With("attempt_id", t.ID)
	log.Warn("system failure", "err", err)
	if aerr := p.Abort(s.ctx, t); aerr != nil {
		log.Error("abort after a system failure failed", "err", aerr)
	}
	s.finalize(a, p, t)
	t.Reset()
	return systemFailure(plugin.SystemCode(err), err)
}

// finalize runs the plugin's Finalize once, within finalizeTimeout; a
// failure is logged.
func (s *Supervisor) finalize(a *attempt, p plugin.Plugin, t *plugin.Task) {
	ctx, cancel := context.WithTimeout(s.ctx, finalizeTimeout)
	defer cancel()
	if err := a.finalizer(p)(ctx, t); err != nil {
		s.log.Error("finalize failed", "attempt_id", t.ID, "err", err)
	}
}

// building reports BUILDING and waits for the answer, before the work
// starts: false when the control plane answered that the attempt must not
// run (it ended meanwhile: preempted or aborted while ASSIGNED, its worker
// lost, ...). A lost answer is no reason to stop an attempt whose read
// said it may run; for one started from its dispatch unread
// (unconfirmed), it marks the attempt dropped: it never starts, and the
// control plane's resync dispatches it again while it stays ASSIGNED. An
// attempt stopped while it waited (an abort, which ends the wait) is not
// dropped: it ends as stopped, and says so in its final report.
func (s *Supervisor) building(a *attempt) bool {
	rep := workerapi.AttemptReport{State: api.TaskStateBUILDING}
	if !a.unconfirmed {
		return s.report(a, rep)
	}
	proceed, err := s.rep.Submit(a.ctx, a.spec.Id, rep)()
	if err != nil {
		a.dropped = a.stopReason() == nil
		return false
	}
	return proceed
}

// report sends a progress report within a's context. It returns false only
// when the control plane answered that the attempt must stop: a lost
// progress report is no reason to kill a process.
func (s *Supervisor) report(a *attempt, rep workerapi.AttemptReport) bool {
	return s.proceed(a, rep, s.rep.Submit(a.ctx, a.spec.Id, rep))
}

// proceed waits for the answer to a's progress report rep, as report.
func (s *Supervisor) proceed(a *attempt, rep workerapi.AttemptReport, wait func() (bool, error)) bool {
	proceed, err := wait()
	if err != nil {
		if a.ctx.Err() == nil {
			s.log.Warn("report lost", "attempt_id", a.spec.Id, "state", rep.State, "err", err)
		}
		return true
	}
	return proceed
}
