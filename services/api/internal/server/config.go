package server

import (
	"cmp"
	"fmt"
	"net/netip"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerkey"
)

// Config tunes the server. A zero field takes its default; a negative one
// is out of range (see Validate).
type Config struct {
	// AbortMaxAttempts is the abort reconciler's delivery rounds per abort
	// (its MaxAttempts), a count; an abort task's asynq retries are
	// queue.AbortTaskRetries of it. Default 10.
	AbortMaxAttempts int
	// WorkerGrace: a worker silent this long is shown unresponsive. Default 5s.
	WorkerGrace time.Duration
	// MaxBodyBytes caps request bodies, in bytes, but an attempt report's
	// (at least 8 MiB: it carries a task's outputs). Default 1 MiB (1048576).
	MaxBodyBytes int64
	// LogMaxBytes bounds the output stored per attempt while it runs, in
	// bytes: past it the oldest chunks are dropped, a marker in their place.
	// Default 10 MiB (10485760).
	LogMaxBytes int64
	// LogFollowMax bounds one logs?follow=true stream, and one event
	// stream: past it the stream ends without an `end` event and the client
	// reconnects with Last-Event-ID. Default 1h.
	LogFollowMax time.Duration
	// LogPollInterval is how often a logs?follow=true stream re-reads its
	// attempt when nothing woke it: a fallback, as a commit of the
	// attempt's chunks or state wakes it through the api's LISTEN
	// connection (Deps.Feed). Default 5s.
	LogPollInterval time.Duration
	// RateLimit is how many requests a second one token may send, counted
	// once it authenticated, by token id; past it and RateBurst, 429.
	// Default 1000.
	RateLimit float64
	// RateBurst is how many requests over RateLimit one token may send at
	// once. Default 2×RateLimit.
	RateBurst int
	// IPRateLimit is how many requests a second one client address may
	// send without a token the api holds in memory (none, an unknown or
	// revoked one, or one it has not looked up within TokenCacheTTL),
	// counted before the token is looked up; past it and IPRateBurst, 429.
	// An IPv6 client is counted by its /64. The probes are free. Default
	// 1000.
	IPRateLimit float64
	// IPRateBurst is how many requests over IPRateLimit one address may
	// send at once. Default 2×IPRateLimit.
	IPRateBurst int
	// TrustedProxies are the proxies whose X-Forwarded-For the api
	// believes for the client address: when the connection comes from one,
	// the client is the rightmost entry that is not one of them. Default
	// none: the client is the connection's peer, X-Forwarded-For ignored.
	TrustedProxies []netip.Prefix
	// TokenCacheTTL is how long the api remembers a token's row, for at
	// most 10,000 tokens, so that a client's every request does not cost a
	// statement: a revocation through this api replica takes effect at
	// once, one through another replica (or in the database) within
	// TokenCacheTTL. Expiry is checked on every request. At least 1ms.
	// Default 5s.
	TokenCacheTTL time.Duration
	// UnknownTokenTTL is how long the api remembers that a bearer secret
	// names no token, so that a client repeating it costs no statement,
	// for at most 100,000 secrets (the least recently seen forgotten
	// first). At least 1ms. Default 30s.
	UnknownTokenTTL time.Duration
	// MaxStreams bounds the server-sent event streams (a project's or a
	// run's events, logs?follow=true) open on this process; past it, 429
	// with Retry-After. Default 2000.
	MaxStreams int
	// MaxStreamsPerToken bounds the streams one token holds open on this
	// process; past it, 429 with Retry-After. Default 100.
	MaxStreamsPerToken int
	// WriteTimeout bounds writing an answer, but for streams (logs
	// follow, events). Default 1m.
	WriteTimeout time.Duration
	// AdminToken is the bootstrap admin secret (CAPSTAN_ADMIN_TOKEN),
	// compared in constant time; "" disables it (then only api_tokens rows
	// authenticate). No default.
	AdminToken string
	// WorkerToken is the bootstrap worker secret (CAPSTAN_WORKER_TOKEN):
	// it may register workers, each answered with a token bound to it. ""
	// disables it. No default.
	WorkerToken string
	// WorkerCIDRs are the networks a worker's address must resolve into
	// at registration (every address its host resolves to): the api and the
	// abort reconciler call that address, so a worker token cannot point
	// them at anything else. Default DefaultWorkerCIDRs.
	WorkerCIDRs []netip.Prefix
	// ControlPlaneKey is CAPSTAN_CONTROL_PLANE_KEY, shared with the
	// scheduler and the abort reconciler: a registration derives the
	// worker's executor credential and dispatch key from it (package
	// workerkey). Zero fails every registration. No default.
	ControlPlaneKey workerkey.Key
}

// DefaultWorkerCIDRs are loopback and the private ranges (RFC 1918, RFC
// 4193).
var DefaultWorkerCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("fc00::/7")}

// Defaults of Config.
const (
	DefaultAbortMaxAttempts = 10
	DefaultWorkerGrace      = 5 * time.Second
	DefaultMaxBodyBytes     = 1 << 20
	DefaultLogMaxBytes      = domain.DefaultLogMaxBytes
	DefaultLogFollowMax     = time.Hour
	DefaultLogPollInterval  = 5 * time.Second
	DefaultRateLimit        = 1000
	DefaultIPRateLimit      = 1000
	DefaultTokenCacheTTL    = 5 * time.Second
	DefaultUnknownTokenTTL  = 30 * time.Second
	DefaultMaxStreams       = 2000
	DefaultMaxStreamsToken  = 100
	DefaultWriteTimeout     = time.Minute
)

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.AbortMaxAttempts = cmp.Or(c.AbortMaxAttempts, DefaultAbortMaxAttempts)
	c.WorkerGrace = cmp.Or(c.WorkerGrace, DefaultWorkerGrace)
	if len(c.WorkerCIDRs) == 0 {
		c.WorkerCIDRs = DefaultWorkerCIDRs
	}
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.LogMaxBytes = cmp.Or(c.LogMaxBytes, DefaultLogMaxBytes)
	c.LogFollowMax = cmp.Or(c.LogFollowMax, DefaultLogFollowMax)
	c.LogPollInterval = cmp.Or(c.LogPollInterval, DefaultLogPollInterval)
	c.RateLimit = cmp.Or(c.RateLimit, DefaultRateLimit)
	c.RateBurst = cmp.Or(c.RateBurst, int(2*c.RateLimit))
	c.IPRateLimit = cmp.Or(c.IPRateLimit, DefaultIPRateLimit)
	c.IPRateBurst = cmp.Or(c.IPRateBurst, int(2*c.IPRateLimit))
	c.TokenCacheTTL = cmp.Or(c.TokenCacheTTL, DefaultTokenCacheTTL)
	c.UnknownTokenTTL = cmp.Or(c.UnknownTokenTTL, DefaultUnknownTokenTTL)
	c.MaxStreams = cmp.Or(c.MaxStreams, DefaultMaxStreams)
	c.MaxStreamsPerToken = cmp.Or(c.MaxStreamsPerToken, DefaultMaxStreamsToken)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	return c
}

// Validate returns what is out of range in c once its defaults are
// applied, or nil. New requires it to pass; a main calls it to report a bad
// environment before it connects to anything.
func (c Config) Validate() error { return c.withDefaults().validate() }

// validate checks a config that went through withDefaults; its error names
// the first field out of range.
func (c Config) validate() error {
	switch {
	case c.AbortMaxAttempts < 1:
		return fmt.Errorf("server config: AbortMaxAttempts must be positive, got %d", c.AbortMaxAttempts)
	case c.WorkerGrace <= 0:
		return fmt.Errorf("server config: WorkerGrace must be positive, got %s", c.WorkerGrace)
	case c.MaxBodyBytes <= 0:
		return fmt.Errorf("server config: MaxBodyBytes must be positive, got %d", c.MaxBodyBytes)
	case c.LogMaxBytes <= 0:
		return fmt.Errorf("server config: LogMaxBytes must be positive, got %d", c.LogMaxBytes)
	case c.LogFollowMax <= 0:
		return fmt.Errorf("server config: LogFollowMax must be positive, got %s", c.LogFollowMax)
	case c.LogPollInterval <= 0:
		return fmt.Errorf("server config: LogPollInterval must be positive, got %s", c.LogPollInterval)
	case c.RateLimit <= 0 || c.RateBurst < 1:
		return fmt.Errorf("server config: RateLimit and RateBurst must be positive, got %g and %d", c.RateLimit, c.RateBurst)
	case c.IPRateLimit <= 0 || c.IPRateBurst < 1:
		return fmt.Errorf("server config: IPRateLimit and IPRateBurst must be positive, got %g and %d",
			c.IPRateLimit, c.IPRateBurst)
	case c.TokenCacheTTL < time.Millisecond || c.UnknownTokenTTL < time.Millisecond:
		// The caches sweep every TTL/100: a shorter TTL would stop them.
		return fmt.Errorf("server config: TokenCacheTTL and UnknownTokenTTL must be at least 1ms, got %s and %s",
			c.TokenCacheTTL, c.UnknownTokenTTL)
	case c.MaxStreams < 1 || c.MaxStreamsPerToken < 1:
		return fmt.Errorf("server config: MaxStreams and MaxStreamsPerToken must be positive, got %d and %d",
			c.MaxStreams, c.MaxStreamsPerToken)
	case c.WriteTimeout <= 0:
		return fmt.Errorf("server config: WriteTimeout must be positive, got %s", c.WriteTimeout)
	}
	return nil
}
