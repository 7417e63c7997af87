// Command capstan-executor runs attempts for Capstan: it registers as a
// worker, heartbeats, consumes its queue worker:<id>, runs each attempt's
// process, reports its states to the api and serves POST
// /v1/attempts/{id}/abort, /healthz, /readyz and /metrics. Configuration is
// read from the environment: see Config.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
	"github.com/capstan-run/capstan/services/executor/internal/server"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/hibiken/asynq"
)

// service names the executor in its logs.
const service = "executor"

func main() {
	cfg, err := env.ParseAs[Config]()
	svc.Healthcheck(os.Args[1:], cfg.Addr)
	err = errors.Join(err, svc.CheckSecrets(map[string]string{"CAPSTAN_WORKER_TOKEN": cfg.WorkerToken,
		"CAPSTAN_EXECUTOR_METRICS_TOKEN": cfg.MetricsToken}))
	log := svc.Setup(service, cfg.Common, err)
	svc.Exit(log, run(cfg, log))
}

// executor is the wired service.
type executor struct {
	sup       *supervisor.Supervisor
	agent     *agent.Agent
	server    *server.Server
	ln        net.Listener
	advertise string
	// redis answers the readiness check's PING.
	redis *asynq.Client
	// client talks to the api as the worker.
	client *agent.Client
	// kube is the kubernetes plugin, nil when it is off.
	kube *plugin.Kubernetes
	// stopKube stops the kubernetes plugin's informers.
	stopKube context.CancelFunc
}

// build wires the executor; it listens at once, so the advertised address
// is real before registration.
func build(cfg Config, log *slog.Logger) (*executor, error) {
	client, err := agent.NewClient(cfg.APIURL, agent.ClientConfig{Token: cfg.WorkerToken}, log)
	if err != nil {
		return nil, err
	}
	kubeCtx, stopKube := context.WithCancel(context.Background())
	built := false
	defer func() {
		if !built {
			stopKube()
		}
	}()
	kube, err := newKubernetes(kubeCtx, cfg)
	if err != nil {
		return nil, err
	}
	plugins, err := newPlugins(cfg, kube, log)
	if err != nil {
		return nil, err
	}
	sup, box, err := newSupervisor(cfg, client, plugins, log)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	advertise, err := cfg.advertiseURL(ln.Addr())
	if err != nil {
		return nil, errors.Join(err, ln.Close())
	}
	ag, err := agent.New(client, sup, cfg.Redis(), agent.Config{Name: cfg.workerName(), Address: advertise,
		Slots: cfg.slots(), Labels: cfg.Labels, Plugins: plugins.Names(), Resources: cfg.resources(),
		Sandbox: sandboxName(box), HeartbeatInterval: cfg.HeartbeatInterval,
		PollInterval: cfg.PollInterval, IDFile: cfg.IDFile, SweepInterval: cfg.SweepInterval}, log)
	if err != nil {
		return nil, errors.Join(err, ln.Close())
	}
	srv := server.New(sup, log)
	srv.ServeMetrics(newRegistry(sup, cfg.slots()))
	redis := asynq.NewClient(cfg.Redis())
	srv.SetDependencies(dependencies(redis, cfg.APIURL))
	// Only the control plane knows the credential of this worker's
	// current registration: the executor's API takes no other.
	srv.Guard(client.ExecutorCredential, cfg.MetricsToken)
	built = true
	return &executor{sup: sup, agent: ag, server: srv, ln: ln, advertise: advertise, redis: redis, client: client,
		kube: kube, stopKube: stopKube}, nil
}

// newSupervisor returns the supervisor of the executor's attempts, in its
// sandbox (nil with Insecure), which a probe attempt must pass first.
// Errors: ErrNoSandbox, with why; an invalid config.
func newSupervisor(cfg Config, client *agent.Client, plugins *plugin.Registry,
	log *slog.Logger) (*supervisor.Supervisor, *sandbox.Sandbox, error) {
	box, err := newSandbox(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	sup, err := supervisor.New(client, supervisor.Config{Slots: cfg.slots(), DataDir: cfg.DataDir,
		KillGrace: cfg.KillGrace, LogLimit: cfg.LogLimit, Plugins: plugins, RunAs: cfg.RunAs, Sandbox: box,
		PassEnv: cfg.PassEnv, MaxProcs: cfg.AttemptProcs}, log)
	if err != nil && box != nil {
		return nil, nil, refusal(err)
	}
	if err != nil {
		return nil, nil, err
	}
	if box != nil {
		if err := box.Probe(sup.DataDir()); err != nil {
			return nil, nil, refusal(err)
		}
		log.Info("attempts are sandboxed", "sandbox", box.Name(), "uids", cfg.UIDRange.String(),
			"lock_dir", cfg.LockDir)
	}
	return sup, box, nil
}

// newPlugins returns the registry of the plugins the executor runs: the
// container plugin only when ContainerRuntime finds a working runtime (a
// named one that does not work is logged, not fatal: the executor runs the
// other plugins). Errors: an unknown ContainerRuntime, an HTTPAllow that
// does not parse.
func newPlugins(cfg Config, kube *plugin.Kubernetes, log *slog.Logger) (*plugin.Registry, error) {
	rt, err := plugin.DetectRuntime(context.Background(), cfg.ContainerRuntime, 0)
	if err != nil && !isMode(cfg.ContainerRuntime) {
		return nil, err
	}
	if err != nil {
		log.Warn("container runtime does not work; no container plugin", "runtime", cfg.ContainerRuntime, "err", err)
	}
	allow, err := plugin.ParseHTTPAllow(cfg.HTTPAllow)
	if err != nil {
		return nil, err
	}
	reg := plugin.NewDefault(plugin.Config{Runtime: rt, HTTPAllow: allow, HTTPTimeout: cfg.HTTPTimeout, Kubernetes: kube})
	log.Info("plugins", "plugins", reg.Names(), "container_runtime", rt)
	return reg, nil
}

// isMode reports whether mode is a valid ContainerRuntime.
func isMode(mode string) bool {
	return slices.Contains([]string{plugin.RuntimeAuto, plugin.RuntimeDocker, plugin.RuntimePodman, plugin.RuntimeNone}, mode)
}

// run wires the executor and runs it until SIGINT or SIGTERM (or its
// rejection by the control plane), then drains it and shuts down.
func run(cfg Config, log *slog.Logger) error {
	ctx, stop := svc.SignalContext()
	defer stop()
	stopTracing, err := svc.StartTracing(ctx, service, log)
	if err != nil {
		return fmt.Errorf("start tracing: %w", err)
	}
	defer stopTracing()
	e, err := build(cfg, log)
	if err != nil {
		return err
	}
	defer e.redis.Close()
	defer e.stopKube()
	reapCtx, stopReaping := context.WithCancel(context.Background())
	defer stopReaping() // reap until the very end: shutdown kills orphan grandchildren
	go func() {
		if err := runner.ReapOrphans(reapCtx, log); err != nil {
			log.Warn("orphans will not be reaped", "err", err)
		}
	}()
	srvCtx, stopServer := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		err := e.server.Serve(srvCtx, e.ln)
		stop() // without its API the executor cannot be aborted: shut down
		served <- err
	}()
	log.Info("serving", "addr", e.ln.Addr().String(), "advertise", e.advertise)

	// The agent heartbeats until the very end, so a draining worker is never
	// declared dead; it stops consuming when the drain begins.
	agentCtx, stopAgent := context.WithCancel(context.Background())
	defer stopAgent()
	ran := make(chan error, 1)
	go func() { ran <- e.agent.Run(agentCtx) }()
	go e.sweepPods(agentCtx, cfg, e.client, log)
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-ran: // rejected by the control plane
		ran <- runErr
	}
	e.drain(cfg, log)
	stopAgent()
	runErr = <-ran
	closeCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := e.agent.Deregister(closeCtx); err != nil {
		log.Error("deregistration failed; the worker will be declared dead", "err", err)
	}
	stopServer() // the abort endpoint stays up until the attempts are gone
	return errors.Join(runErr, <-served)
}

// drain shuts the executor's work down: it takes no new attempt and tells
// the control plane so, lets the running ones finish for up to DrainTimeout
// (a second SIGTERM or SIGINT ends the wait), then kills the rest, which are
// reported WORKER_FAILED so the scheduler runs them elsewhere.
func (e *executor) drain(cfg Config, log *slog.Logger) {
	held := len(e.sup.Held())
	log.Info("draining", "held", held, "timeout", cfg.DrainTimeout.String())
	e.agent.Drain()
	drainCtx, cancel := svc.SignalContext()
	defer cancel()
	drainCtx, cancelTimeout := context.WithTimeout(drainCtx, cfg.DrainTimeout)
	defer cancelTimeout()
	if err := e.sup.Drain(drainCtx); err != nil {
		log.Warn("drain ended before the attempts; killing them", "held", len(e.sup.Held()), "err", err)
	}
	closeCtx, cancelClose := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancelClose()
	if err := e.sup.Close(closeCtx); err != nil {
		log.Error("attempts not closed cleanly", "err", err)
	}
}
