package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
)

// inClusterNamespace is where a Pod's service account names its namespace.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// newKubernetes returns the kubernetes plugin when cfg turns it on (nil
// otherwise), its informers running until ctx ends: its client is
// $KUBECONFIG's, else the cluster's the executor runs in. Errors: no
// cluster configuration.
func newKubernetes(ctx context.Context, cfg Config) (*plugin.Kubernetes, error) {
	if !cfg.Kubernetes {
		return nil, nil
	}
	rest, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return nil, fmt.Errorf("kubernetes plugin: no cluster (set KUBECONFIG, or run in a Pod): %w", err)
	}
	rest.QPS, rest.Burst = 500, 1000 // one executor creates and deletes up to KubernetesMaxPods Pods
	rest.UserAgent = "capstan-executor"
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return nil, fmt.Errorf("kubernetes plugin: %w", err)
	}
	ns := cfg.KubernetesNamespace
	if ns == "" {
		if b, err := os.ReadFile(inClusterNamespace); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	return plugin.NewKubernetes(ctx, plugin.KubernetesConfig{Client: client, Namespace: cmp.Or(ns, plugin.DefaultNamespace),
		ImagePullGrace: cfg.KubernetesImagePullGrace, ServiceAccount: cfg.KubernetesServiceAccount,
		ServiceAccounts: cfg.KubernetesServiceAccounts})
}

// sweepPods runs the kubernetes plugin's sweep of orphan Pods from the
// worker's registration until ctx ends, as the agent's current worker:
// it re-adopts the Pods a previous identity of this executor left running
// and deletes those whose attempts are no longer live.
func (e *executor) sweepPods(ctx context.Context, cfg Config, client *agent.Client, log *slog.Logger) {
	if e.kube == nil {
		return
	}
	tick := time.NewTicker(registeredPoll)
	for e.agent.WorkerID() == "" {
		select {
		case <-ctx.Done():
			tick.Stop()
			return
		case <-tick.C:
		}
	}
	tick.Stop()
	live := func(ctx context.Context, ids []int64) (map[int64]bool, error) {
		id, err := uuid.Parse(e.agent.WorkerID())
		if err != nil {
			return nil, agent.ErrNotRegistered
		}
		return client.LiveAttempts(ctx, id, ids)
	}
	e.kube.RunSweep(ctx, cfg.KubernetesSweepInterval, e.agent.Adopt, live, e.sup.Holds, log)
}

// registeredPoll is how often sweepPods looks for the worker's first
// registration.
const registeredPoll = 50 * time.Millisecond
