package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/capstan-run/capstan/pkg/svc"
)

// Config is the executor's configuration, read from the environment.
type Config struct {
	svc.Common
	// APIURL is the Capstan api's base URL. Env CAPSTAN_API_URL, default
	// http://127.0.0.1:8080.
	APIURL string `env:"CAPSTAN_API_URL" envDefault:"http://127.0.0.1:8080"`
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
	// HeartbeatInterval is the time between heartbeats. Env
	// CAPSTAN_HEARTBEAT_INTERVAL, default 2s.
	HeartbeatInterval time.Duration `env:"CAPSTAN_HEARTBEAT_INTERVAL" envDefault:"2s"`
	// PollInterval is how often an idle consumer polls its queue (asynq
	// TaskCheckInterval); it bounds dispatch latency. Env
	// CAPSTAN_POLL_INTERVAL, default 50ms.
	PollInterval time.Duration `env:"CAPSTAN_POLL_INTERVAL" envDefault:"50ms"`
	// KillGrace is the time between SIGTERM and SIGKILL when killing an
	// attempt's process group. Env CAPSTAN_KILL_GRACE, default 2s.
	KillGrace time.Duration `env:"CAPSTAN_KILL_GRACE" envDefault:"2s"`
	// LogLimit is how many bytes of stdout and of stderr are kept per
	// attempt (the last ones). Env CAPSTAN_LOG_LIMIT, in bytes, default 65536.
	LogLimit int `env:"CAPSTAN_LOG_LIMIT" envDefault:"65536"`
	// IDFile, when set, receives the worker id after each registration. Env
	// CAPSTAN_ID_FILE, default unset.
	IDFile string `env:"CAPSTAN_ID_FILE"`
	// ShutdownTimeout bounds the final reports on shutdown. Env
	// CAPSTAN_SHUTDOWN_TIMEOUT, default 10s.
	ShutdownTimeout time.Duration `env:"CAPSTAN_SHUTDOWN_TIMEOUT" envDefault:"10s"`
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
