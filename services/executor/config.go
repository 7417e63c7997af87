package main

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
)

// Config is the executor's configuration, read from the environment.
type Config struct {
	svc.Common
	// APIURL is the Capstan api's base URL. Env CAPSTAN_API_URL, default
	// http://127.0.0.1:8080.
	APIURL string `env:"CAPSTAN_API_URL" envDefault:"http://127.0.0.1:8080"`
	// WorkerToken is the worker bearer secret it registers with; each
	// registration answers a token bound to the worker for the other calls.
	// Env CAPSTAN_WORKER_TOKEN, no default.
	WorkerToken string `env:"CAPSTAN_WORKER_TOKEN"`
	// Insecure runs attempts without the sandbox: every attempt of every
	// project as one user (RunAs, or the executor's own), sharing /tmp, the
	// PID space and the network, unbounded. Without it the executor gives
	// each attempt a user, namespaces and limits of its own, and refuses to
	// start where it may not (it needs root). Env CAPSTAN_EXECUTOR_INSECURE,
	// default false.
	Insecure bool `env:"CAPSTAN_EXECUTOR_INSECURE" envDefault:"false"`
	// RunAs, "uid:gid", is the unprivileged user and group attempts' shell
	// processes run as with Insecure, so that a task cannot read the
	// executor's credentials; the executor then needs root (or CAP_SETUID,
	// CAP_SETGID and CAP_KILL). Env CAPSTAN_EXECUTOR_RUN_AS, default unset:
	// the executor's own user. Only with CAPSTAN_EXECUTOR_INSECURE=1: the
	// sandbox gives each attempt its own user.
	RunAs *runner.Credential `env:"CAPSTAN_EXECUTOR_RUN_AS"`
	// UIDRange, "first-last", are the users (each also the group) the
	// sandbox gives attempts, one each while it runs: the 65,536 ids from
	// 100000 by default, above a host's accounts. Executors of one host
	// that share it must share LockDir. Env CAPSTAN_EXECUTOR_UID_RANGE,
	// default 100000-165535.
	UIDRange sandbox.Range `env:"CAPSTAN_EXECUTOR_UID_RANGE" envDefault:"100000-165535"`
	// RunGIDRange, "first-last", are the groups the sandbox gives run
	// directories (the run's tasks share it through its group); it must not
	// overlap UIDRange. Env CAPSTAN_EXECUTOR_RUN_GID_RANGE, default
	// 165536-231071.
	RunGIDRange sandbox.Range `env:"CAPSTAN_EXECUTOR_RUN_GID_RANGE" envDefault:"165536-231071"`
	// LockDir holds the sandbox's uid leases and run group claims, a lock
	// file each; every executor of a host must use the same one (on the
	// host, not in a container of its own), so that no two attempts get
	// one uid. Env CAPSTAN_EXECUTOR_LOCK_DIR, default /run/capstan.
	LockDir string `env:"CAPSTAN_EXECUTOR_LOCK_DIR" envDefault:"/run/capstan"`
	// AttemptProcs bounds each attempt's processes and threads: the
	// sandbox's RLIMIT_NPROC of its user and pids.max of its cgroup, a
	// container's --pids-limit. Env CAPSTAN_EXECUTOR_ATTEMPT_PROCS, default
	// 4096.
	AttemptProcs int `env:"CAPSTAN_EXECUTOR_ATTEMPT_PROCS" envDefault:"4096"`
	// Cgroups is auto (each sandboxed attempt gets a cgroup v2 with its
	// step's limits where the host delegates the executor's cgroup to it,
	// the executor alone in it) or off. Env CAPSTAN_EXECUTOR_CGROUPS,
	// default auto.
	Cgroups string `env:"CAPSTAN_EXECUTOR_CGROUPS" envDefault:"auto"`
	// PassEnv names variables of the executor's environment that tasks get
	// too, "NAME,NAME2"; a task gets only PATH, HOME, LANG and TZ of it
	// otherwise (HOME is a sandboxed attempt's work directory). Env
	// CAPSTAN_EXECUTOR_PASS_ENV, default none.
	PassEnv []string `env:"CAPSTAN_EXECUTOR_PASS_ENV" envSeparator:","`
	// MetricsToken is the bearer secret GET /metrics on the executor's API
	// requires: the operator's scraper's, never sent by the control plane
	// (whose calls carry the worker's own executor credential, which each
	// registration answers). Env CAPSTAN_EXECUTOR_METRICS_TOKEN, default
	// unset: /metrics answers 401.
	MetricsToken string `env:"CAPSTAN_EXECUTOR_METRICS_TOKEN"`
	// Addr is the listen address of the executor's API; port 0 picks a free
	// port. Env CAPSTAN_EXECUTOR_ADDR, default 127.0.0.1:0.
	Addr string `env:"CAPSTAN_EXECUTOR_ADDR" envDefault:"127.0.0.1:0"`
	// AdvertiseURL is the base URL the control plane calls this executor at.
	// Env CAPSTAN_EXECUTOR_ADVERTISE_URL, default http://<listen host>:<port>
	// (127.0.0.1 when listening on all interfaces).
	AdvertiseURL string `env:"CAPSTAN_EXECUTOR_ADVERTISE_URL"`
	// AdvertiseHostFromHostname derives the advertised URL from
	// os.Hostname() instead of the listen host, e.g. in docker compose. Env
	// CAPSTAN_EXECUTOR_ADVERTISE_HOST_FROM_HOSTNAME, default false.
	AdvertiseHostFromHostname bool `env:"CAPSTAN_EXECUTOR_ADVERTISE_HOST_FROM_HOSTNAME" envDefault:"false"`
	// Name is the worker's name. Env CAPSTAN_EXECUTOR_NAME, default
	// <hostname>-<pid>.
	Name string `env:"CAPSTAN_EXECUTOR_NAME"`
	// Slots is how many attempts run at once, 1 to 1024. Env
	// CAPSTAN_EXECUTOR_SLOTS, default 4.
	Slots int `env:"CAPSTAN_EXECUTOR_SLOTS" envDefault:"4"`
	// Labels are the worker's labels, "k=v,k2=v2". Env
	// CAPSTAN_EXECUTOR_LABELS, default none.
	Labels map[string]string `env:"CAPSTAN_EXECUTOR_LABELS" envSeparator:"," envKeyValSeparator:"="`
	// DataDir holds attempts/<id>/ (work dirs) and
	// runs/<project>/<domain>/<run>/ (run dirs). Env CAPSTAN_DATA_DIR,
	// default ./.data/executor.
	DataDir string `env:"CAPSTAN_DATA_DIR" envDefault:"./.data/executor"`
	// SweepInterval is the time between sweeps of DataDir, after the one at
	// each registration: the executor removes the run directories of runs
	// the api no longer knows (deleted) and the work directories of
	// attempts no executor runs, which a lost runs:remove message or an
	// executor killed mid-attempt leaves. Env
	// CAPSTAN_EXECUTOR_SWEEP_INTERVAL, default 10m.
	SweepInterval time.Duration `env:"CAPSTAN_EXECUTOR_SWEEP_INTERVAL" envDefault:"10m"`
	// HeartbeatInterval is the time between heartbeats. Env
	// CAPSTAN_HEARTBEAT_INTERVAL, default 1s.
	HeartbeatInterval time.Duration `env:"CAPSTAN_HEARTBEAT_INTERVAL" envDefault:"1s"`
	// PollInterval is how often an idle consumer polls its queue (asynq
	// TaskCheckInterval: it sleeps half of it to one and a half between
	// empty polls). New attempts arrive at once through the worker's wake
	// list (a blocking Redis pop), so the poll only bounds how late an
	// attempt whose wake-up was lost starts. Env CAPSTAN_POLL_INTERVAL,
	// default 1s.
	PollInterval time.Duration `env:"CAPSTAN_POLL_INTERVAL" envDefault:"1s"`
	// KillGrace is the time between SIGTERM and SIGKILL when aborting an
	// attempt whose spec gives no kill_grace_ms (a step's kill_grace always
	// wins; the api sends it). Env CAPSTAN_KILL_GRACE, default
	// domain.DefaultKillGrace (10s).
	KillGrace time.Duration `env:"CAPSTAN_KILL_GRACE"`
	// ContainerRuntime picks the container plugin's runtime: auto (`docker
	// version`, then `podman version`, on $PATH, whichever answers first),
	// docker, podman, or none (no container plugin). Without a working
	// runtime the executor does not advertise plugin.container. Env
	// CAPSTAN_CONTAINER_RUNTIME, default auto.
	ContainerRuntime string `env:"CAPSTAN_CONTAINER_RUNTIME" envDefault:"auto"`
	// HTTPAllow lists, comma-separated, the loopback, link-local
	// (169.254.0.0/16, fe80::/10: cloud metadata endpoints) and unspecified
	// targets the http plugin may reach anyway: CIDRs ("127.0.0.0/8"),
	// addresses ("::1") or host names (every address they resolve to). The
	// plugin checks the address each connection goes to, redirects
	// included. Env CAPSTAN_HTTP_ALLOW, default none.
	HTTPAllow string `env:"CAPSTAN_HTTP_ALLOW"`
	// HTTPTimeout bounds an http attempt whose step sets neither
	// attempt_timeout nor timeout: its request, redirects and body. Env
	// CAPSTAN_HTTP_TIMEOUT, default 5m.
	HTTPTimeout time.Duration `env:"CAPSTAN_HTTP_TIMEOUT" envDefault:"5m"`
	// LogLimit is how many bytes of stdout and of stderr are kept per
	// attempt (the last ones). Env CAPSTAN_LOG_LIMIT, in bytes, default 65536.
	LogLimit int `env:"CAPSTAN_LOG_LIMIT" envDefault:"65536"`
	// IDFile, when set, receives the worker id after each registration. Env
	// CAPSTAN_ID_FILE, default unset.
	IDFile string `env:"CAPSTAN_ID_FILE"`
	// ShutdownTimeout bounds the final reports on shutdown. Env
	// CAPSTAN_SHUTDOWN_TIMEOUT, default 10s.
	ShutdownTimeout time.Duration `env:"CAPSTAN_SHUTDOWN_TIMEOUT" envDefault:"10s"`
	// DrainTimeout is how long SIGTERM lets running attempts finish before
	// the rest are killed and reported WORKER_FAILED (a second SIGTERM or
	// SIGINT ends it at once). Keep DrainTimeout + ShutdownTimeout under the
	// orchestrator's stop grace (Kubernetes' terminationGracePeriodSeconds).
	// Env CAPSTAN_DRAIN_TIMEOUT, default 60s.
	DrainTimeout time.Duration `env:"CAPSTAN_DRAIN_TIMEOUT" envDefault:"60s"`
	// Kubernetes turns on the kubernetes plugin: each of its attempts runs
	// as a Pod of the cluster that $KUBECONFIG names, or else the one the
	// executor runs in (its service account). The executor then registers
	// KubernetesMaxPods slots and no host resources: Kubernetes places the
	// Pods. Env CAPSTAN_KUBERNETES, default false.
	Kubernetes bool `env:"CAPSTAN_KUBERNETES" envDefault:"false"`
	// KubernetesNamespace holds the Pods of the steps that name no
	// namespace. Env CAPSTAN_KUBERNETES_NAMESPACE, default the executor's
	// own namespace in a cluster, else "default".
	KubernetesNamespace string `env:"CAPSTAN_KUBERNETES_NAMESPACE"`
	// KubernetesMaxPods is how many Pods the executor runs at once (its
	// slots, 1 to 1024, instead of CAPSTAN_EXECUTOR_SLOTS). Env
	// CAPSTAN_KUBERNETES_MAX_PODS, default 1000.
	KubernetesMaxPods int `env:"CAPSTAN_KUBERNETES_MAX_PODS" envDefault:"1000"`
	// KubernetesImagePullGrace is how long a Pod's image may fail to pull
	// before its attempt fails with ImagePullBackOff. Env
	// CAPSTAN_KUBERNETES_IMAGE_PULL_GRACE, default 5m.
	KubernetesImagePullGrace time.Duration `env:"CAPSTAN_KUBERNETES_IMAGE_PULL_GRACE" envDefault:"5m"`
	// KubernetesSweepInterval is the time between sweeps of orphan Pods:
	// the executor deletes the Pods whose attempts are no longer live (an
	// executor killed mid-attempt, an attempt that ended while its executor
	// was down). Env CAPSTAN_KUBERNETES_SWEEP_INTERVAL, default 30s.
	KubernetesSweepInterval time.Duration `env:"CAPSTAN_KUBERNETES_SWEEP_INTERVAL" envDefault:"30s"`
	// KubernetesServiceAccount is the Pods' service account when a step
	// names none. Env CAPSTAN_KUBERNETES_SERVICE_ACCOUNT, default unset: the
	// namespace's default service account.
	KubernetesServiceAccount string `env:"CAPSTAN_KUBERNETES_SERVICE_ACCOUNT"`
	// KubernetesServiceAccounts lists, comma-separated, the other service
	// accounts a step's kubernetes.service_account may name; a step naming
	// one not listed fails (InvalidPluginSpec). Env
	// CAPSTAN_KUBERNETES_SERVICE_ACCOUNTS, default none.
	KubernetesServiceAccounts []string `env:"CAPSTAN_KUBERNETES_SERVICE_ACCOUNTS" envSeparator:","`
	// CPUMillis is the CPU the worker offers, in millicores (1000 = one
	// core). Env CAPSTAN_EXECUTOR_CPU_MILLIS, default runtime.NumCPU()*1000.
	CPUMillis int64 `env:"CAPSTAN_EXECUTOR_CPU_MILLIS"`
	// MemoryBytes is the memory the worker offers, in bytes. Env
	// CAPSTAN_EXECUTOR_MEMORY_BYTES, default MemTotal of /proc/meminfo, or
	// the cgroup's memory.max when lower; undeclared when neither is known.
	MemoryBytes int64 `env:"CAPSTAN_EXECUTOR_MEMORY_BYTES"`
}

// resources returns the capacity to register: CPUMillis and MemoryBytes, or
// their defaults; none for a kubernetes executor (Kubernetes places its
// Pods).
func (c Config) resources() api.Resources {
	if c.Kubernetes {
		return api.Resources{}
	}
	cpu := c.CPUMillis
	if cpu <= 0 {
		cpu = int64(runtime.NumCPU()) * 1000
	}
	res := api.Resources{CpuMillis: &cpu}
	mem := c.MemoryBytes
	if mem <= 0 {
		mem = hostMemory("/proc/meminfo", "/sys/fs/cgroup/memory.max")
	}
	if mem > 0 {
		res.MemoryBytes = &mem
	}
	return res
}

// hostMemory returns MemTotal of meminfo in bytes, lowered to the cgroup
// v2 limit in memoryMax when that is a number; 0 when unknown.
func hostMemory(meminfo, memoryMax string) int64 {
	var total int64
	if b, err := os.ReadFile(meminfo); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(rest) // "16318412 kB"
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil && len(f) == 2 && f[1] == "kB" {
					total = kb * 1024
				}
			}
		}
	}
	if b, err := os.ReadFile(memoryMax); err == nil {
		if limit, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && limit > 0 &&
			(total == 0 || limit < total) {
			total = limit
		}
	}
	return total
}

// workerName returns Name, or <hostname>-<pid>.
func (c Config) workerName() string {
	if c.Name != "" {
		return c.Name
	}
	host, err := os.Hostname()
	if err != nil {
		host = "executor"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// advertiseURL returns AdvertiseURL, or one derived from the address the
// API actually listens on.
func (c Config) advertiseURL(ln net.Addr) (string, error) {
	if c.AdvertiseURL != "" {
		return c.AdvertiseURL, nil
	}
	host, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", ln, err)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	if c.AdvertiseHostFromHostname {
		if host, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("hostname: %w", err)
		}
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// slots returns how many attempts run at once: KubernetesMaxPods for a
// kubernetes executor, else Slots.
func (c Config) slots() int {
	if c.Kubernetes {
		return c.KubernetesMaxPods
	}
	return c.Slots
}
