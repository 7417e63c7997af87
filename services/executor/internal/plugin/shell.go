package plugin

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/capstan-run/capstan/services/executor/internal/runner"
)

// Shell is the shell plugin: the step's command with /bin/sh -c, or its args
// executed directly (no shell), in the attempt's work directory, under the
// runner's shim: as the attempt's user, in its own namespaces and limits
// when sandboxed (Task.Isolation), else in its own process group. A program
// that cannot be executed is a system failure (code ExecFailed); an exit
// with the step's wait_exit_code is PhaseWaiting (code NotReady); another
// non-zero exit is a user failure (code NonZeroExit).
type Shell struct{}

var _ Plugin = Shell{}

// process is the state of an attempt that runs a process.
type process struct{ proc *runner.Process }

// Handle starts the process, then observes it.
func (Shell) Handle(ctx context.Context, t *Task) (Transition, error) {
	if st, ok := t.State.(*process); ok {
		return observe(ctx, st.proc, func(res runner.Result) (Transition, error) {
			tr, err := exitTransition(res)
			return waitingExit(tr, t.Spec.WaitExitCode, res), err
		})
	}
	p, err := runner.Start(runner.Spec{Command: t.Spec.Command, Args: t.Spec.Args, Dir: t.Dir, Env: t.HostEnv,
		LogLimit: t.LogLimit, OnOutput: t.OnOutput, RunAs: t.RunAs, Isolation: t.Isolation})
	if err != nil && t.Isolation != nil && errors.Is(err, syscall.EPERM) {
		return Transition{}, fmt.Errorf("isolate the attempt (namespaces need CAP_SYS_ADMIN; a network: none "+
			"step needs an executor that may make them): %w", err)
	}
	if err != nil {
		return Transition{}, err
	}
	t.State = &process{proc: p}
	return Transition{Phase: PhaseRunning, Pid: p.Pid()}, nil
}

// Abort kills the process group: SIGTERM, KillGrace, SIGKILL. Errors:
// runner.ErrStuck, a signal that could not be sent.
func (Shell) Abort(_ context.Context, t *Task) error { return killProcess(t) }

// Finalize does nothing: the runner swept the process group when its leader
// exited, and the supervisor removes the work directory.
func (Shell) Finalize(context.Context, *Task) error { return nil }

func killProcess(t *Task) error {
	st, ok := t.State.(*process)
	if !ok {
		return nil
	}
	return st.proc.Kill(t.KillGrace)
}

// observe waits for proc to exit, then turns its result into a transition
// with decide; it answers PhaseRunning when ctx ends first.
func observe(ctx context.Context, proc *runner.Process, decide func(runner.Result) (Transition, error)) (Transition, error) {
	select {
	case <-proc.Exited():
		return decide(proc.Wait())
	case <-ctx.Done():
		return Transition{Phase: PhaseRunning, Pid: proc.Pid()}, nil
	}
}

// exitTransition is a process's end: PhaseSuccess on exit 0, else a user
// failure: "a non-zero exit is a user failure".
func exitTransition(res runner.Result) (Transition, error) {
	tr := withResult(Transition{Phase: PhaseSuccess}, res)
	if res.ExitCode != 0 {
		tr.Phase, tr.Code, tr.Err = PhaseRetryableFailure, CodeNonZeroExit, exitMessage(res)
	}
	return tr, nil
}

// waitingExit makes tr, a process's end, PhaseWaiting (code NotReady) when
// it exited with the step's wait_exit_code (nil: none): "not ready yet".
func waitingExit(tr Transition, code *int, res runner.Result) Transition {
	if code != nil && res.Signal == 0 && res.ExitCode == *code {
		tr.Phase, tr.Code, tr.Err = PhaseWaiting, CodeNotReady, exitMessage(res)+" (the wait_exit_code: not ready yet)"
	}
	return tr
}

func exitMessage(res runner.Result) string {
	if res.Signal != 0 {
		return fmt.Sprintf("killed by signal %d (%v)", int(res.Signal), res.Signal)
	}
	return fmt.Sprintf("exit status %d", res.ExitCode)
}

func withResult(tr Transition, res runner.Result) Transition {
	code := res.ExitCode
	tr.ExitCode, tr.Stdout, tr.Stderr, tr.Truncated = &code, res.Stdout, res.Stderr, res.Truncated
	return tr
}
