package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
)

// runtimeFailed is docker's (and podman's) exit status when the runtime
// itself failed, before the container started.
const runtimeFailed = 125

// runtimeCommandTimeout bounds a `stop` or `rm -f` beyond the kill grace.
const runtimeCommandTimeout = 30 * time.Second

// Container is the container plugin: `<runtime> run --rm` of the step's
// image, args and env, named ContainerName, labelled capstan.attempt=<id>,
// with the work and run directories mounted at the same paths (so
// $CAPSTAN_OUTPUTS_DIR and $CAPSTAN_INPUTS_DIR work inside) and the work
// directory as its working directory, as the attempt's user (and its run's
// group), with no capability and no new privileges, its processes, memory
// and CPU bounded, and no network for a network: none step (RunArgs). The
// runtime's CLI runs under the runner's shim like a shell attempt, as the
// executor's user (it talks to the runtime's daemon), in the attempt's PID
// namespace when sandboxed (Task.RuntimeIsolation). Exit status 125 (the runtime failed
// before the container started) or a runtime that cannot be executed is a
// system failure (code ContainerRuntimeError); another non-zero exit is a
// user failure.
type Container struct {
	// Runtime is the runtime's program, "docker" or "podman" (a name on
	// $PATH or a path). Required.
	Runtime string
}

var _ Plugin = (*Container)(nil)

// ContainerName is the container of attempt id: capstan-<id>.
func ContainerName(id int64) string { return "capstan-" + strconv.FormatInt(id, 10) }

// RunArgs is the argv that runs t's container; nil when t has no container
// spec.
func (c *Container) RunArgs(t *Task) []string {
	if t.Spec.Container == nil {
		return nil
	}
	argv := []string{c.Runtime, "run", "--rm", "--name", ContainerName(t.ID),
		"--label", "capstan.attempt=" + strconv.FormatInt(t.ID, 10), "--label", "capstan.managed=true"}
	argv = append(argv, confinement(t)...)
	for _, m := range t.Mounts {
		argv = append(argv, "-v", m+":"+m)
	}
	if t.Dir != "" {
		argv = append(argv, "-w", t.Dir)
	}
	for _, kv := range t.AttemptEnv {
		argv = append(argv, "-e", kv)
	}
	spec := t.Spec.Container
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		if !strings.HasPrefix(k, "CAPSTAN_") { // the attempt's own variables win
			argv = append(argv, "-e", k+"="+spec.Env[k])
		}
	}
	return append(append(argv, spec.Image), spec.Args...)
}

// confinement are the run flags that confine t's container: no capability
// and no new privileges (setuid programs gain nothing); the attempt's user
// and its groups (RunAs), or the executor's own when it is not root (the
// attempt's directories are its); --pids-limit from MaxProcs; --memory
// (bytes) and --cpus from the step's resources; --network none for a
// network: none step.
func confinement(t *Task) []string {
	flags := []string{"--cap-drop=ALL", "--security-opt=no-new-privileges"}
	switch {
	case t.RunAs != nil:
		flags = append(flags, "--user="+t.RunAs.String())
		for _, g := range t.RunAs.Groups {
			flags = append(flags, "--group-add="+strconv.FormatUint(uint64(g), 10))
		}
	case os.Geteuid() != 0:
		flags = append(flags, fmt.Sprintf("--user=%d:%d", os.Geteuid(), os.Getegid()))
	}
	if t.MaxProcs > 0 {
		flags = append(flags, "--pids-limit="+strconv.Itoa(t.MaxProcs))
	}
	if m := t.Resources.MemoryBytes; m > 0 {
		flags = append(flags, "--memory="+strconv.FormatInt(m, 10))
	}
	if c := t.Resources.CPUMillis; c > 0 {
		flags = append(flags, "--cpus="+strconv.FormatFloat(float64(c)/1000, 'f', -1, 64))
	}
	if t.Network == domain.NetworkNone {
		flags = append(flags, "--network=none")
	}
	return flags
}

// Handle starts `<runtime> run`, then observes it.
func (c *Container) Handle(ctx context.Context, t *Task) (Transition, error) {
	if st, ok := t.State.(*process); ok {
		return observe(ctx, st.proc, containerTransition)
	}
	if t.Spec.Container == nil {
		return Transition{}, errors.New("container plugin without a container")
	}
	p, err := runner.Start(runner.Spec{Args: c.RunArgs(t), Dir: t.Dir, Env: t.RuntimeEnv, LogLimit: t.LogLimit,
		OnOutput: t.OnOutput, Isolation: t.RuntimeIsolation})
	if err != nil {
		return Transition{}, &SystemError{Code: CodeContainerRuntimeError, Err: fmt.Errorf("%s run: %w", c.Runtime, err)}
	}
	t.State = &process{proc: p}
	return Transition{Phase: PhaseRunning, Pid: p.Pid()}, nil
}

// containerTransition is `run`'s end: exit status 125 is the runtime's
// failure (a system failure), others are the container's (see
// exitTransition).
func containerTransition(res runner.Result) (Transition, error) {
	if res.ExitCode == runtimeFailed && res.Signal == 0 {
		msg := strings.TrimSpace(string(res.Stderr))
		return Transition{}, &SystemError{Code: CodeContainerRuntimeError,
			Err: fmt.Errorf("the container runtime failed before the container started (exit status 125): %s", msg)}
	}
	return exitTransition(res)
}

// Abort stops the container (`<runtime> stop -t <grace seconds>`: SIGTERM,
// then SIGKILL after the grace), then kills the runtime CLI's process group.
// A container that does not exist (any more) is stopped. Errors: the
// runtime's, or the CLI that would not die.
func (c *Container) Abort(ctx context.Context, t *Task) error {
	if _, ok := t.State.(*process); !ok {
		return nil
	}
	grace := int(math.Ceil(t.KillGrace.Seconds()))
	err := c.runtime(ctx, t.KillGrace, "stop", "-t", strconv.Itoa(grace), ContainerName(t.ID))
	return errors.Join(err, killProcess(t))
}

// Finalize removes the container (`<runtime> rm -f`), in case it was not
// removed by --rm; "no such container" is success.
func (c *Container) Finalize(ctx context.Context, t *Task) error {
	return c.runtime(ctx, 0, "rm", "-f", ContainerName(t.ID))
}

// runtime runs `<runtime> args...` within grace+runtimeCommandTimeout.
func (c *Container) runtime(ctx context.Context, grace time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, grace+runtimeCommandTimeout)
	defer cancel()
	code, out, err := runner.Exec(ctx, nil, append([]string{c.Runtime}, args...)...)
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: %w", c.Runtime, args[0], err)
	case code != 0 && !strings.Contains(strings.ToLower(out), "no such container"):
		return fmt.Errorf("%s %s: exit status %d: %s", c.Runtime, args[0], code, out)
	}
	return nil
}
