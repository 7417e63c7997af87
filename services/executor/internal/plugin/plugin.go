// Package plugin holds the ways an executor runs an attempt, behind one
// interface looked up by the attempt's plugin name (Flyte's executor
// (TaskActionReconciler) and its plugin registry): shell, http, container
// and noop.
package plugin

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
)

// Plugin runs one kind of attempt (Flyte's plugin interface). The attempt's
// goroutine calls its methods one at a time for a given Task.
type Plugin interface {
	// Handle starts the attempt's work on its first call and observes it on
	// later ones (Flyte's Handle): it returns the attempt's next Transition.
	// An observing call waits until the work ends or ctx ends, and then
	// answers PhaseRunning. An error is a system failure (the platform, not
	// the user's code, failed); a *SystemError carries its code.
	Handle(ctx context.Context, t *Task) (Transition, error)
	// Abort stops in-flight work (Flyte's Abort) and returns once it is
	// stopped. Aborting work that ended or never started does nothing. An
	// error means the work may still run: the caller retries.
	Abort(ctx context.Context, t *Task) error
	// Finalize cleans up what the attempt left (Flyte's Finalize), once the
	// work is stopped. It is idempotent; an error means the caller retries.
	Finalize(ctx context.Context, t *Task) error
}

// WorkDirless is implemented by a plugin whose attempts need no work
// directory and no BUILDING report (noop): the supervisor makes none. Its
// Handle must have no effect outside the attempt: without the BUILDING
// report's answer, an attempt started from its dispatch
// (supervisor.StartDispatched) is not confirmed before Handle runs, and
// one that ended meanwhile (preempted, aborted) learns it only from its
// RUNNING report's answer.
type WorkDirless interface {
	WorkDirless()
}

// Task is one attempt as its plugin sees it (Flyte's task execution
// context).
type Task struct {
	// ID is the attempt's id.
	ID int64
	// Spec is the plugin and its fields, already validated.
	Spec domain.PluginSpec
	// Dir is the attempt's work directory (made by the supervisor); empty
	// for a WorkDirless plugin.
	Dir string
	// Mounts are directories a containerised process must see at the same
	// path: the work directory and the run's shared one.
	Mounts []string
	// HostEnv is a host process's complete environment, "KEY=value" each:
	// the executor's allowed variables, then AttemptEnv.
	HostEnv []string
	// RuntimeEnv is a container runtime CLI's complete environment: the
	// executor's own (less its CAPSTAN_* settings), then AttemptEnv.
	RuntimeEnv []string
	// AttemptEnv is the attempt's own environment (the step's env, the
	// inputs, the CAPSTAN_* variables), without the executor's: what a
	// container gets.
	AttemptEnv []string
	// OutputsDir is $CAPSTAN_OUTPUTS_DIR: a plugin that produces an output
	// itself (http's body) writes it there.
	OutputsDir string
	// Outputs are the names of the outputs the step declares.
	Outputs []string
	// KillGrace is how long aborted work has between SIGTERM and SIGKILL.
	KillGrace time.Duration
	// RunAs, when set, is the user a host process (shell) runs as, and a
	// container's (--user); the container runtime's CLI keeps the
	// executor's.
	RunAs *runner.Credential
	// Isolation, when set, is how a host process (shell) is isolated.
	Isolation *runner.Isolation
	// RuntimeIsolation, when set, is how a container runtime's CLI is.
	RuntimeIsolation *runner.Isolation
	// Network is the step's network: domain.NetworkNone, or "" for the
	// executor's.
	Network string
	// Resources are the step's; a container gets them as its limits.
	Resources domain.Resources
	// MaxProcs, when positive, bounds a container's processes
	// (--pids-limit).
	MaxProcs int
	// Timeout bounds the attempt's work where the plugin bounds it itself
	// (http): the step's attempt_timeout, else its timeout; 0 for none
	// (the plugin's default).
	Timeout time.Duration
	// LogLimit is how many bytes of stdout and of stderr are kept.
	LogLimit int
	// LogSkip is how many bytes of the attempt's output the control plane
	// already holds, counted as the supervisor ships them (invalid UTF-8
	// runs as one U+FFFD, NUL dropped): a plugin that reads its work's
	// output again from the start (kubernetes, a Pod adopted from a
	// previous identity of the executor) does not hand them to OnOutput
	// again. 0 for an attempt that never ran.
	LogSkip int64
	// OnOutput, when set, sees the process's output as it is read (see
	// runner.Spec.OnOutput): the supervisor ships it while the attempt runs.
	OnOutput func(stream string, p []byte)
	// OnPending, when set, hears why work that waits to be placed (a Pod
	// no node takes) waits, each time the reason changes: the supervisor
	// reports it as the task's pending_reason.
	OnPending func(reason string)
	// State is the plugin's own state of the attempt (Flyte's PluginState):
	// nil before the first Handle; Reset clears it.
	State any
}

// Reset forgets the plugin's state, so that the next Handle starts afresh
// (Flyte's resetPluginResource, after Abort).
func (t *Task) Reset() { t.State = nil }

// Phase is where a Transition leaves the attempt.
type Phase int

// Phases of a Transition (Flyte's plugin phases).
const (
	// PhaseRunning: the work runs.
	PhaseRunning Phase = iota
	// PhaseSuccess: the work ended well.
	PhaseSuccess
	// PhaseRetryableFailure: the user's work failed (cause user); the
	// control plane retries it under the step's max_retries_failure.
	PhaseRetryableFailure
	// PhasePermanentFailure: the work can never succeed as specified
	// (cause permanent); it is not retried.
	PhasePermanentFailure
	// PhaseWaiting: the work answered that its target is not ready yet (an
	// http wait code, a shell wait exit code; cause waiting): the control
	// plane runs it again after KubeVela's waiting backoff, charged to no
	// budget.
	PhaseWaiting
	// PhaseLost: the work was lost with the machine it ran on, not by its
	// own fault (a Pod evicted or gone with its node): WORKER_FAILED, cause
	// worker_lost, which the control plane retries under the preemption
	// budget.
	PhaseLost
)

// Transition is what Handle found.
type Transition struct {
	Phase Phase
	// Pid is the process group the work runs in, 0 when it has none.
	Pid int
	// Code is a stable error code of a failure, e.g. NonZeroExit.
	Code string
	// Err says why a failure failed.
	Err string
	// ExitCode is the process's exit status (128+signal when a signal ended
	// it), nil when no process ran.
	ExitCode *int
	// Stdout and Stderr are what the work wrote (their last bytes).
	Stdout, Stderr []byte
	// Truncated is true when either was cut.
	Truncated bool
	// Outputs, when not nil, are the attempt's outputs; nil: the supervisor
	// reads the declared ones from OutputsDir.
	Outputs map[string]string
}

// Ended reports whether the transition is final.
func (tr Transition) Ended() bool { return tr.Phase != PhaseRunning }

// Error codes of the failures the executor classifies (an attempt report's
// code).
const (
	CodeUnknownPlugin         = "UnknownPlugin"
	CodeInvalidPluginSpec     = "InvalidPluginSpec"
	CodeSystemError           = "SystemError"
	CodeExecFailed            = "ExecFailed"
	CodeWorkDirFailed         = "WorkDirFailed"
	CodeContainerRuntimeError = "ContainerRuntimeError"
	CodeNonZeroExit           = "NonZeroExit"
	CodeHTTPServerError       = "HTTPServerError"
	CodeHTTPTransportError    = "HTTPTransportError"
	CodeHTTPClientError       = "HTTPClientError"
	CodeHTTPUnexpectedStatus  = "HTTPUnexpectedStatus"
	CodeHTTPBodyNotText       = "HTTPBodyNotText"
	CodeHTTPTargetRefused     = "HTTPTargetRefused"
	CodeHTTPTooManyRedirects  = "HTTPTooManyRedirects"
	CodeHTTPTimeout           = "HTTPTimeout"
	// CodeNotReady: the work answered that its target is not ready yet
	// (PhaseWaiting).
	CodeNotReady = "NotReady"
)

// SystemError is a system failure with its code: "System failures are
// transient issues ... that are not the fault of the user's code" (Flyte's
// executor (TaskActionReconciler)).
type SystemError struct {
	Code string
	Err  error
}

func (e *SystemError) Error() string { return e.Err.Error() }
func (e *SystemError) Unwrap() error { return e.Err }

// SystemCode returns err's code: a *SystemError's, CodeExecFailed for a
// program that could not be executed, else CodeSystemError.
func SystemCode(err error) string {
	var se *SystemError
	var ee *runner.ExecError
	switch {
	case errors.As(err, &se) && se.Code != "":
		return se.Code
	case errors.As(err, &ee):
		return CodeExecFailed
	}
	return CodeSystemError
}

// Registry maps plugin names to plugins (Flyte's PluginRegistry).
type Registry struct {
	plugins map[string]Plugin
}

// NewRegistry returns a registry of plugins by name.
func NewRegistry(plugins map[string]Plugin) *Registry {
	return &Registry{plugins: plugins}
}

// Lookup returns the plugin registered under name.
func (r *Registry) Lookup(name string) (Plugin, bool) {
	p, ok := r.plugins[name]
	return p, ok
}

// Names lists the registered plugins, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.plugins))
	for n := range r.plugins {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
