// Package svc holds the wiring every Capstan service shares: a JSON slog
// logger, the asynq Redis options, a small HTTP server for /healthz, /readyz
// and /metrics, and running until a signal.
package svc

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Common holds the settings every service reads from the environment.
type Common struct {
	// DatabaseURL is the Postgres URL. Required by services that use Postgres.
	DatabaseURL string `env:"CAPSTAN_DATABASE_URL" envDefault:"postgres://capstan@127.0.0.1:55432/capstan?sslmode=disable"`
	// RedisAddr is host:port of Redis. Default 127.0.0.1:56379.
	RedisAddr string `env:"CAPSTAN_REDIS_ADDR" envDefault:"127.0.0.1:56379"`
	// RedisDB is the Redis database number. Default 0.
	RedisDB int `env:"CAPSTAN_REDIS_DB" envDefault:"0"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `env:"CAPSTAN_LOG_LEVEL" envDefault:"info"`
	// PprofAddr, when set, serves net/http/pprof there (see StartPprof), e.g.
	// 127.0.0.1:6060. Env CAPSTAN_PPROF_ADDR, default unset (off).
	PprofAddr string `env:"CAPSTAN_PPROF_ADDR"`
}

// Redis returns the asynq connection options for RedisAddr and RedisDB.
func (c Common) Redis() asynq.RedisClientOpt {
	return asynq.RedisClientOpt{Addr: c.RedisAddr, DB: c.RedisDB}
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

// Fatal logs msg with err and exits 1.
func Fatal(log *slog.Logger, msg string, err error) {
	log.Error(msg, "err", err)
	os.Exit(1)
}

// HealthServer serves /healthz (the process is up), /readyz (ready() returns
// nil) and /metrics (the registry) on addr until ctx ends.
type HealthServer struct {
	srv *http.Server
	ln  net.Listener
}

// NewHealthServer listens on addr at once, so a caller knows the port is held.
func NewHealthServer(addr string, reg *prometheus.Registry, ready func(context.Context) error) (*HealthServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return &HealthServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}, nil
}

// Addr is the listening address.
func (h *HealthServer) Addr() string { return h.ln.Addr().String() }

// Run serves until ctx ends, then shuts down.
func (h *HealthServer) Run(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.srv.Shutdown(sctx)
	}()
	if err := h.srv.Serve(h.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// NewRegistry returns a Prometheus registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return reg
}
