package plugin

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
)

// Container runtime modes (the executor's CAPSTAN_CONTAINER_RUNTIME).
const (
	RuntimeAuto   = "auto"
	RuntimeDocker = "docker"
	RuntimePodman = "podman"
	RuntimeNone   = "none"
)

// DefaultProbeTimeout bounds one `<runtime> version` probe.
const DefaultProbeTimeout = 5 * time.Second

// Config configures the plugins of an executor.
type Config struct {
	// Runtime is the container runtime's program found by DetectRuntime;
	// empty: no container plugin.
	Runtime string
	// HTTPAllow lists the loopback, link-local and unspecified targets the
	// http plugin may reach anyway. Default none.
	HTTPAllow HTTPAllow
	// HTTPTimeout bounds an http attempt whose step gives no timeout.
	// Default DefaultHTTPTimeout.
	HTTPTimeout time.Duration
	// Kubernetes, when set, is the kubernetes plugin.
	Kubernetes *Kubernetes
}

// NewDefault returns the registry of the plugins this executor runs:
// shell, http and noop always, container when cfg.Runtime is set,
// kubernetes when cfg.Kubernetes is.
func NewDefault(cfg Config) *Registry {
	plugins := map[string]Plugin{domain.PluginShell: Shell{}, domain.PluginHTTP: &HTTP{Allow: cfg.HTTPAllow, Timeout: cfg.HTTPTimeout},
		domain.PluginNoop: Noop{}}
	if cfg.Runtime != "" {
		plugins[domain.PluginContainer] = &Container{Runtime: cfg.Runtime}
	}
	if cfg.Kubernetes != nil {
		plugins[domain.PluginKubernetes] = cfg.Kubernetes
	}
	return NewRegistry(plugins)
}

// DetectRuntime finds a working container runtime for mode: auto tries
// `docker version`, then `podman version`, on $PATH, each within timeout
// (default DefaultProbeTimeout); docker or podman tries that one; none
// finds none. It returns the runtime's program, or "" when none works.
// Errors: an unknown mode; with docker or podman, why it does not work.
func DetectRuntime(ctx context.Context, mode string, timeout time.Duration) (string, error) {
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	var candidates []string
	switch mode {
	case RuntimeAuto, "":
		candidates = []string{RuntimeDocker, RuntimePodman}
	case RuntimeDocker, RuntimePodman:
		candidates = []string{mode}
	case RuntimeNone:
		return "", nil
	default:
		return "", fmt.Errorf("container runtime %q: want auto, docker, podman or none", mode)
	}
	var lastErr error
	for _, name := range candidates {
		if lastErr = probe(ctx, name, timeout); lastErr == nil {
			return name, nil
		}
	}
	if mode == RuntimeDocker || mode == RuntimePodman {
		return "", lastErr
	}
	return "", nil
}

// probe checks that `name version` exits 0 within timeout.
func probe(ctx context.Context, name string, timeout time.Duration) error {
	path, err := exec.LookPath(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	code, out, err := runner.Exec(ctx, nil, path, "version")
	switch {
	case err != nil:
		return fmt.Errorf("%s version: %w", name, err)
	case code != 0:
		return fmt.Errorf("%s version: exit status %d: %s", name, code, out)
	}
	return nil
}
