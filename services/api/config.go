package main

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/capstan-run/capstan/services/api/internal/server"
)

// config is the api's environment, and the command its arguments name. An
// unset (or zero) setting the server owns takes its default in
// server.Config; durations are Go durations ("5s", "1m").
type config struct {
	svc.Common
	// Addr is the listen address (host:port) of the API, the dashboard,
	// /healthz, /readyz and /metrics. Default 127.0.0.1:8080.
	Addr string `env:"CAPSTAN_API_ADDR" envDefault:"127.0.0.1:8080"`
	// AbortMaxAttempts is the abort reconciler's ABORT_MAX_ATTEMPTS (a count
	// of delivery rounds); the api sizes abort tasks' asynq retries from it.
	// Default 10.
	AbortMaxAttempts int `env:"ABORT_MAX_ATTEMPTS"`
	// WorkerGrace is how long a worker may miss heartbeats before it is
	// shown as unresponsive; the api stamps that it serves heartbeats every
	// min(WorkerGrace/4, 1s) (the scheduler's liveness fence reads it: set
	// it alike on both). Default 5s.
	WorkerGrace time.Duration `env:"CAPSTAN_WORKER_GRACE"`
	// MaxBodyBytes caps request bodies, in bytes, but an attempt report's
	// (at least 8 MiB: it carries a task's outputs). Default 1048576 (1 MiB).
	MaxBodyBytes int64 `env:"CAPSTAN_API_MAX_BODY_BYTES"`
	// LogMaxBytes bounds the output stored per attempt while it runs, in
	// bytes; past it the oldest is dropped. Default 10485760 (10 MiB).
	LogMaxBytes int64 `env:"CAPSTAN_LOG_MAX_BYTES"`
	// LogFollowMax bounds one logs?follow=true stream; the client then
	// reconnects. Default 1h.
	LogFollowMax time.Duration `env:"CAPSTAN_LOG_FOLLOW_MAX"`
	// LogFollowPoll is how often a logs?follow=true stream re-reads its
	// attempt when no notification woke it, a fallback: the api's LISTEN
	// connection wakes it when chunks or a state change of the attempt
	// commit. Default 5s.
	LogFollowPoll time.Duration `env:"CAPSTAN_LOG_FOLLOW_POLL"`
	// RateLimit is the requests a second one token may send before 429s,
	// counted by token id once it authenticated. Default 1000.
	RateLimit float64 `env:"CAPSTAN_API_RATE_LIMIT"`
	// RateBurst is the requests over RateLimit a token may send at once.
	// Default 2×RateLimit.
	RateBurst int `env:"CAPSTAN_API_RATE_BURST"`
	// IPRateLimit is the requests a second one client address may send
	// without a token the api holds in memory (none, an unknown one, or
	// one not looked up within CAPSTAN_API_TOKEN_CACHE_TTL), counted before
	// any lookup. Default 1000.
	IPRateLimit float64 `env:"CAPSTAN_API_IP_RATE_LIMIT"`
	// IPRateBurst is the requests over IPRateLimit one address may send
	// at once. Default 2×IPRateLimit.
	IPRateBurst int `env:"CAPSTAN_API_IP_RATE_BURST"`
	// TrustedProxies are the proxies (comma-separated CIDRs) whose
	// X-Forwarded-For names the client address. Default none: the
	// connection's peer is the client.
	TrustedProxies []netip.Prefix `env:"CAPSTAN_API_TRUSTED_PROXIES" envSeparator:","`
	// TokenCacheTTL is how long the api remembers a token it looked up (at
	// most 10,000): a revocation through another api replica, or in the
	// database, takes effect within it. At least 1ms. Default 5s.
	TokenCacheTTL time.Duration `env:"CAPSTAN_API_TOKEN_CACHE_TTL"`
	// UnknownTokenTTL is how long the api remembers that a bearer secret
	// names no token (at most 100,000), so that repeating it costs no
	// statement. At least 1ms. Default 30s.
	UnknownTokenTTL time.Duration `env:"CAPSTAN_API_UNKNOWN_TOKEN_TTL"`
	// MaxStreams bounds the server-sent event streams (events, and
	// logs?follow=true) open on this api; past it, 429. Default 2000.
	MaxStreams int `env:"CAPSTAN_API_MAX_STREAMS"`
	// MaxStreamsPerToken bounds the streams one token holds open on this
	// api; past it, 429. Default 100.
	MaxStreamsPerToken int `env:"CAPSTAN_API_MAX_STREAMS_PER_TOKEN"`
	// WriteTimeout bounds writing an answer but a stream's. Default 1m.
	WriteTimeout time.Duration `env:"CAPSTAN_API_WRITE_TIMEOUT"`
	// AdminToken is the bootstrap admin bearer secret. Default unset: only
	// tokens made through /v1/tokens authenticate. It is compared in
	// constant time and never logged.
	AdminToken string `env:"CAPSTAN_ADMIN_TOKEN"`
	// WorkerToken is the bootstrap worker bearer secret executors register
	// with (CAPSTAN_WORKER_TOKEN on the executors too). Default unset: only
	// worker tokens made through /v1/tokens register.
	WorkerToken string `env:"CAPSTAN_WORKER_TOKEN"`
	// ControlPlaneKey is the secret the api shares with the scheduler and
	// the abort reconciler, and with no executor: each worker's executor
	// credential and dispatch key are derived from it at registration (see
	// package workerkey). Required to serve; at least 32 bytes. Set it
	// alike on the three. No default.
	ControlPlaneKey string `env:"CAPSTAN_CONTROL_PLANE_KEY"`
	// WorkerCIDRs are the networks (comma-separated CIDRs) a worker's
	// registered address must resolve into. Default loopback and the
	// private ranges: 127.0.0.0/8, ::1/128, 10.0.0.0/8, 172.16.0.0/12,
	// 192.168.0.0/16, fc00::/7.
	WorkerCIDRs []netip.Prefix `env:"CAPSTAN_WORKER_CIDRS" envSeparator:","`
	// ArchiveURL is the gocloud.dev blob URL of the archive a delete of a
	// run writes the run to first (file:///var/lib/capstan/archive,
	// s3://bucket?region=…; gs:// and azblob:// with the build tags
	// archive_gcs and archive_azblob), read back by
	// GET .../archived-runs/{run}. Default unset: the archive is off and a
	// delete keeps nothing.
	ArchiveURL string `env:"CAPSTAN_ARCHIVE_URL"`
	// migrate is set by the argument "migrate": apply the database
	// migrations and exit instead of serving.
	migrate bool
	// healthcheck is set by the argument "healthcheck": probe this
	// configuration's /readyz and exit (svc.ProbeExit).
	healthcheck bool
}

// parseConfig reads the environment (opts.Environment, or the process's
// when nil) and the arguments: none to serve, "migrate" or "healthcheck".
func parseConfig(args []string, opts env.Options) (config, error) {
	cfg, err := env.ParseAsWithOptions[config](opts)
	if err != nil || len(args) == 0 {
		return cfg, err
	}
	switch args[0] {
	case "migrate":
		cfg.migrate = true
	case svc.HealthcheckArg:
		cfg.healthcheck = true
	default:
		return cfg, fmt.Errorf("unknown command %q (want: migrate, %s, or no argument to serve)", args[0], svc.HealthcheckArg)
	}
	return cfg, nil
}

// validate checks what the env tags cannot: the server's ranges, that the
// bootstrap tokens and the control-plane key are not placeholders or short
// (svc.CheckSecrets), and that the key is set to serve (migrate needs
// none).
func (c config) validate() error {
	var errs []error
	if c.ControlPlaneKey == "" && !c.migrate {
		errs = append(errs, errors.New("CAPSTAN_CONTROL_PLANE_KEY is required: workers get their credentials from it"))
	}
	return errors.Join(append(errs, c.server().Validate(),
		svc.CheckSecrets(map[string]string{"CAPSTAN_ADMIN_TOKEN": c.AdminToken, "CAPSTAN_WORKER_TOKEN": c.WorkerToken,
			"CAPSTAN_CONTROL_PLANE_KEY": c.ControlPlaneKey}))...)
}

// stampEvery is the heartbeat path's stamp period: min(WorkerGrace/4, 1s),
// the scheduler's liveness tick, so that a stamp is never older than half
// the grace (its outage limit) while the api serves.
func (c config) stampEvery() time.Duration {
	return min(cmp.Or(c.WorkerGrace, server.DefaultWorkerGrace)/4, time.Second)
}

// server returns the server's part of the config.
func (c config) server() server.Config {
	return server.Config{AbortMaxAttempts: c.AbortMaxAttempts, WorkerGrace: c.WorkerGrace, MaxBodyBytes: c.MaxBodyBytes,
		LogMaxBytes: c.LogMaxBytes, LogFollowMax: c.LogFollowMax, LogPollInterval: c.LogFollowPoll, AdminToken: c.AdminToken,
		WorkerToken: c.WorkerToken, WorkerCIDRs: c.WorkerCIDRs,
		RateLimit: c.RateLimit, RateBurst: c.RateBurst, WriteTimeout: c.WriteTimeout,
		IPRateLimit: c.IPRateLimit, IPRateBurst: c.IPRateBurst, TrustedProxies: c.TrustedProxies,
		TokenCacheTTL: c.TokenCacheTTL, UnknownTokenTTL: c.UnknownTokenTTL,
		MaxStreams: c.MaxStreams, MaxStreamsPerToken: c.MaxStreamsPerToken,
		ControlPlaneKey: workerkey.New(c.ControlPlaneKey)}
}
