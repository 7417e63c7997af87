package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"

	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
)

// ErrNoSandbox: the executor may not sandbox attempts and was not told to
// run them without (CAPSTAN_EXECUTOR_INSECURE).
var ErrNoSandbox = errors.New("the executor cannot sandbox attempts")

// envName is the form of a CAPSTAN_EXECUTOR_PASS_ENV name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// newSandbox returns the sandbox the executor runs attempts in, or nil with
// Insecure. Errors: a PassEnv name that is invalid or one of the
// executor's settings (CAPSTAN_*); RunAs without Insecure; an unknown
// Cgroups mode; a sandbox that cannot be made.
func newSandbox(cfg Config, log *slog.Logger) (*sandbox.Sandbox, error) {
	for _, k := range cfg.PassEnv {
		if !envName.MatchString(k) || strings.HasPrefix(k, "CAPSTAN_") {
			return nil, fmt.Errorf("CAPSTAN_EXECUTOR_PASS_ENV: %q is not a variable a task may get", k)
		}
	}
	if cfg.Insecure {
		log.Warn("attempts run without a sandbox (CAPSTAN_EXECUTOR_INSECURE): every attempt as one user",
			"run_as", cfg.RunAs)
		return nil, nil
	}
	if cfg.RunAs != nil {
		return nil, errors.New("CAPSTAN_EXECUTOR_RUN_AS applies only with CAPSTAN_EXECUTOR_INSECURE=1: " +
			"the sandbox gives each attempt a user of its own (CAPSTAN_EXECUTOR_UID_RANGE)")
	}
	var cgroups *sandbox.Cgroups
	switch cfg.Cgroups {
	case "off":
	case "auto":
		self, err := os.ReadFile("/proc/self/cgroup")
		var why string
		if cgroups, why = sandbox.DetectCgroups("/sys/fs/cgroup", self); err == nil && cgroups == nil {
			log.Info("attempts get no cgroup: memory bounded by RLIMIT_DATA, CPU unbounded", "why", why)
		}
	default:
		return nil, fmt.Errorf("CAPSTAN_EXECUTOR_CGROUPS %q: want auto or off", cfg.Cgroups)
	}
	box, err := sandbox.New(sandbox.Config{UIDs: cfg.UIDRange, RunGIDs: cfg.RunGIDRange, LockDir: cfg.LockDir,
		MaxProcs: cfg.AttemptProcs, Cgroups: cgroups})
	if err != nil {
		return nil, refusal(err)
	}
	return box, nil
}

// refusal is why the executor does not start without a sandbox.
func refusal(err error) error {
	return fmt.Errorf("%w (%v): it needs root, for a user and namespaces of each attempt's own; set "+
		"CAPSTAN_EXECUTOR_INSECURE=1 to run every attempt as one user instead", ErrNoSandbox, err)
}

// sandboxName is what the worker registers as its sandbox.
func sandboxName(box *sandbox.Sandbox) string {
	if box == nil {
		return sandbox.None
	}
	return box.Name()
}
