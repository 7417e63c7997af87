// Package svc holds the wiring every Capstan service shares: the settings
// every service reads (Common), a JSON slog logger, the exit statuses of a
// main, HTTP servers for the api and for /healthz, /readyz and /metrics,
// and running until a signal. Package backing opens what the control-plane
// services stand on (Postgres, Redis).
package svc

import (
	"context"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Common holds the settings every service reads from the environment.
type Common struct {
	// DatabaseURL is the Postgres URL of the services that use Postgres.
	// Default postgres://capstan@127.0.0.1:55432/capstan?sslmode=disable
	// (scripts/dev-deps.sh's database).
	DatabaseURL string `env:"CAPSTAN_DATABASE_URL" envDefault:"postgres://capstan@127.0.0.1:55432/capstan?sslmode=disable"`
	// RedisAddr is host:port of Redis. Default 127.0.0.1:56379.
	RedisAddr string `env:"CAPSTAN_REDIS_ADDR" envDefault:"127.0.0.1:56379"`
	// RedisURL, when set, is where Redis is, with its password and TLS
	// (rediss://), and replaces RedisAddr, RedisDB, the password and the
	// sentinels. Env CAPSTAN_REDIS_URL, default unset.
	RedisURL RedisURL `env:"CAPSTAN_REDIS_URL"`
	// RedisDB is the Redis database number. Default 0.
	RedisDB int `env:"CAPSTAN_REDIS_DB" envDefault:"0"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `env:"CAPSTAN_LOG_LEVEL" envDefault:"info"`
	// PprofAddr, when set, serves net/http/pprof there (see StartPprof), e.g.
	// 127.0.0.1:6060. Env CAPSTAN_PPROF_ADDR, default unset (off).
	PprofAddr string `env:"CAPSTAN_PPROF_ADDR"`
	// RedisSentinel, when its Sentinels are set, reaches Redis through Redis
	// Sentinel instead of RedisAddr (see Redis, in redis.go).
	RedisSentinel
}

// NewLogger returns a JSON logger tagged with the service name.
func NewLogger(service, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})).With("service", service)
}

// SignalContext returns a context cancelled on SIGINT or SIGTERM.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// ExitConfig is the exit status of a service whose configuration (its
// environment or arguments) does not parse or is out of range; a failure
// after that exits 1.
const ExitConfig = 2

// Setup begins a service's main once its configuration c is read, err
// being the reading's error: it returns the JSON logger tagged with service
// at c.LogLevel, and starts pprof when c.PprofAddr asks for it. When err is
// not nil it logs "invalid configuration" with it and exits ExitConfig
// instead.
func Setup(service string, c Common, err error) *slog.Logger {
	log := NewLogger(service, c.LogLevel)
	if err != nil {
		log.Error("invalid configuration", "err", err)
		os.Exit(ExitConfig)
	}
	if percent, limit := gcDefaults(os.LookupEnv, memlimit.FromCgroup); percent > 0 {
		debug.SetGCPercent(percent)
		if limit > 0 {
			debug.SetMemoryLimit(limit)
		}
		log.Debug("collector", "gc_percent", percent, "memory_limit_bytes", limit)
	}
	c.StartPprof(log)
	return log
}

// GC defaults of a service whose environment sets neither GOGC nor
// GOMEMLIMIT, Go's own settings of its collector: collect when the heap has
// grown by 400 % of what the last collection left (Go's default is 100),
// and more often as it nears a soft limit: 90 % of its cgroup's memory
// limit (a container's or a pod's, read as automemlimit reads it), or 100
// MiB where the cgroup has none. The services allocate short-lived rows at
// a high rate; without a cgroup limit, 100 MiB keeps the api's peak RSS
// when it accepts runs in bulk within its target (docs/benchmarks.md).
const (
	defaultGCPercent   = 400
	defaultMemoryLimit = 100 << 20 // bytes
	cgroupLimitRatio   = 0.9
)

// gcDefaults returns the GC percent and soft memory limit (bytes) a service
// sets, from its environment (lookup) and its cgroup's memory limit
// (cgroup, memlimit.FromCgroup: bytes, or an error when there is none or
// it cannot be read): none (0, 0) when GOGC is set, which Go applies
// itself with any GOMEMLIMIT; the percent alone when only GOMEMLIMIT is;
// both otherwise.
func gcDefaults(lookup func(string) (string, bool), cgroup func() (uint64, error)) (percent int, limit int64) {
	if _, ok := lookup("GOGC"); ok {
		return 0, 0
	}
	if _, ok := lookup("GOMEMLIMIT"); ok {
		return defaultGCPercent, 0
	}
	if l, err := cgroup(); err == nil && l > 0 && l < math.MaxInt64 {
		return defaultGCPercent, int64(float64(l) * cgroupLimitRatio)
	}
	return defaultGCPercent, defaultMemoryLimit
}

// Exit ends a service's main with the result of its run: nil logs
// "stopped" and returns (exit status 0); any other error logs "failed" with
// it and exits 1.
func Exit(log *slog.Logger, err error) {
	if err != nil {
		log.Error("failed", "err", err)
		os.Exit(1)
	}
	log.Info("stopped")
}

// NewRegistry returns a Prometheus registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
