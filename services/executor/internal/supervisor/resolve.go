package supervisor

import (
	"fmt"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
)

// maxKillGrace bounds an attempt's kill grace: a larger kill_grace_ms is
// taken as this.
const maxKillGrace = time.Hour

// resolve is Flyte's first step (validation and plugin resolution): it
// builds the attempt's plugin spec, validates it and looks its plugin up.
// "If validation fails or no plugin is found for the TaskType, the
// reconciler marks the TaskAction as failed and does not add a finalizer"
// (Flyte's executor (TaskActionReconciler)): then failed is the final
// report, FAILED with cause permanent and code UnknownPlugin or
// InvalidPluginSpec, and nothing ran. A plugin Capstan knows but this
// executor does not run (container without a runtime) is a system failure
// with code PluginUnavailable (domain.CodePluginUnavailable): the scheduler
// retries it while another worker may run it, and never counts it against
// this one.
func (s *Supervisor) resolve(spec workerapi.AttemptSpec) (plugin.Plugin, *plugin.Task, *workerapi.AttemptReport) {
	ps := pluginSpecOf(spec)
	if errs := ps.Validate(); len(errs) > 0 {
		code := plugin.CodeInvalidPluginSpec
		if errs[0].Field == ".plugin" {
			code = plugin.CodeUnknownPlugin
		}
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Field + ": " + e.Message
		}
		rep := permanentFailure(code, fmt.Errorf("invalid plugin spec: %s", strings.Join(msgs, "; ")))
		return nil, nil, &rep
	}
	p, ok := s.cfg.Plugins.Lookup(ps.Plugin)
	if !ok {
		rep := systemFailure(domain.CodePluginUnavailable, fmt.Errorf("this executor does not run the %s plugin (it runs %s)",
			ps.Plugin, strings.Join(s.cfg.Plugins.Names(), ", ")))
		return nil, nil, &rep
	}
	t := &plugin.Task{ID: spec.Id, Spec: ps, Outputs: declaredOutputs(spec), KillGrace: s.killGrace(spec),
		Timeout: attemptTimeout(spec), LogLimit: s.cfg.LogLimit, LogSkip: max(deref(spec.LogBytes), 0), RunAs: s.cfg.RunAs}
	if s.cfg.Sandbox != nil {
		t.RunAs = nil // the attempt's own, once leased (withDirs)
	}
	return p, t, nil
}

// attemptTimeout is the attempt's timeout_ms; 0 when absent or not
// positive.
func attemptTimeout(spec workerapi.AttemptSpec) time.Duration {
	if spec.TimeoutMs == nil || *spec.TimeoutMs <= 0 {
		return 0
	}
	return time.Duration(*spec.TimeoutMs) * time.Millisecond
}

// killGrace is the attempt's kill_grace_ms, at most maxKillGrace; absent or
// negative: the executor's Config.KillGrace.
func (s *Supervisor) killGrace(spec workerapi.AttemptSpec) time.Duration {
	if spec.KillGraceMs == nil || *spec.KillGraceMs < 0 {
		return s.cfg.KillGrace
	}
	return min(time.Duration(*spec.KillGraceMs)*time.Millisecond, maxKillGrace)
}

// pluginSpecOf is the attempt's plugin and its fields in the domain's form.
func pluginSpecOf(spec workerapi.AttemptSpec) domain.PluginSpec {
	ps := domain.PluginSpec{Plugin: spec.Plugin, Command: spec.Command, Env: spec.Env, WaitExitCode: spec.WaitExitCode}
	if spec.Args != nil {
		ps.Args = *spec.Args
	}
	if h := spec.Http; h != nil {
		ps.HTTP = &domain.HTTPSpec{URL: h.Url, Method: deref(h.Method), Body: deref(h.Body)}
		if h.Headers != nil {
			ps.HTTP.Headers = *h.Headers
		}
		if h.SuccessCodes != nil {
			ps.HTTP.SuccessCodes = *h.SuccessCodes
		}
		if h.WaitCodes != nil {
			ps.HTTP.WaitCodes = *h.WaitCodes
		}
	}
	if c := spec.Container; c != nil {
		ps.Container = &domain.ContainerSpec{Image: c.Image}
		if c.Args != nil {
			ps.Container.Args = *c.Args
		}
		if c.Env != nil {
			ps.Container.Env = *c.Env
		}
	}
	if k := spec.Kubernetes; k != nil {
		ps.Kubernetes = new(domain.KubernetesSpec)
		_ = api.ConvertJSON(k, ps.Kubernetes) // the API type mirrors the domain's
	}
	return ps
}

// withDirs gives t its directories, environments and isolation: box's
// when sandboxed (its user, namespaces and limits for a host process; a
// PID namespace and its cgroup for a container runtime's CLI), else
// Config.RunAs and, for a network: none step, a network namespace only.
func (s *Supervisor) withDirs(t *plugin.Task, spec workerapi.AttemptSpec, d dirs, box *sandbox.Attempt) {
	t.Dir, t.Mounts, t.OutputsDir = d.work, []string{d.work, d.run}, d.outputs
	t.AttemptEnv = attemptEnv(spec, d)
	t.RuntimeEnv = append(runtimeEnv(), t.AttemptEnv...)
	t.Network, t.Resources, t.MaxProcs = deref(spec.Network), resourcesOf(spec), s.cfg.MaxProcs
	noNetwork := t.Network == domain.NetworkNone
	if box == nil {
		t.HostEnv = append(s.baseEnv(""), t.AttemptEnv...)
		if noNetwork {
			t.Isolation = &runner.Isolation{NoNetwork: true}
		}
		return
	}
	t.HostEnv = append(s.baseEnv(d.work), t.AttemptEnv...)
	t.RunAs, t.Isolation, t.RuntimeIsolation = box.Credential(), box.Isolation(noNetwork, d.tmp, s.cfg.DataDir), box.CLIIsolation()
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
