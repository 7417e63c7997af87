package main

import (
	"net/netip"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/services/api/internal/server"
	"github.com/stretchr/testify/require"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"CAPSTAN_API_ADDR": "0.0.0.0:8080", "ABORT_MAX_ATTEMPTS": "3",
		"CAPSTAN_WORKER_GRACE": "30s", "CAPSTAN_API_MAX_BODY_BYTES": "1024",
		"CAPSTAN_LOG_MAX_BYTES": "2048", "CAPSTAN_LOG_FOLLOW_MAX": "10m",
		"CAPSTAN_ARCHIVE_URL": "file:///var/lib/capstan/archive", "CAPSTAN_API_TOKEN_CACHE_TTL": "1s",
		"CAPSTAN_API_UNKNOWN_TOKEN_TTL": "2m", "CAPSTAN_API_IP_RATE_LIMIT": "50", "CAPSTAN_API_IP_RATE_BURST": "70",
		"CAPSTAN_API_TRUSTED_PROXIES": "10.0.0.0/8,192.0.2.7/32", "CAPSTAN_API_MAX_STREAMS": "40",
		"CAPSTAN_API_MAX_STREAMS_PER_TOKEN": "4"}
	cfg, err := parseConfig(nil, env.Options{Environment: vars})
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0:8080", cfg.Addr)
	require.Equal(t, "file:///var/lib/capstan/archive", cfg.ArchiveURL)
	require.False(t, cfg.migrate)
	require.Equal(t, server.Config{AbortMaxAttempts: 3, WorkerGrace: 30 * time.Second, MaxBodyBytes: 1024,
		LogMaxBytes: 2048, LogFollowMax: 10 * time.Minute, TokenCacheTTL: time.Second, UnknownTokenTTL: 2 * time.Minute,
		IPRateLimit: 50, IPRateBurst: 70, MaxStreams: 40, MaxStreamsPerToken: 4,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32")}},
		cfg.server())
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(nil, env.Options{Environment: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", cfg.Addr)
	require.Equal(t, "127.0.0.1:56379", cfg.RedisAddr)
	require.Empty(t, cfg.ArchiveURL, "the archive is off")
	require.Equal(t, server.Config{}, cfg.server(), "zero: the server applies its defaults")
}

func TestConfigCommand(t *testing.T) {
	t.Parallel()
	none := env.Options{Environment: map[string]string{}}
	cfg, err := parseConfig([]string{"migrate"}, none)
	require.NoError(t, err)
	require.True(t, cfg.migrate)
	_, err = parseConfig([]string{"serve"}, none)
	require.ErrorContains(t, err, `unknown command "serve"`)
	_, err = parseConfig(nil, env.Options{Environment: map[string]string{"CAPSTAN_WORKER_GRACE": "soon"}})
	require.ErrorContains(t, err, "WorkerGrace")
}

// CAPSTAN_WORKER_CIDRS is a comma list of CIDRs; unset, the server's
// defaults apply; a bad one fails the environment, naming the field.
func TestWorkerCIDRs(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(nil, env.Options{Environment: map[string]string{"CAPSTAN_WORKER_CIDRS": "10.0.0.0/8,fd00::/8"}})
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")},
		cfg.server().WorkerCIDRs)
	cfg, err = parseConfig(nil, env.Options{Environment: map[string]string{}})
	require.NoError(t, err)
	require.Empty(t, cfg.WorkerCIDRs, "unset: the server's defaults")
	_, err = parseConfig(nil, env.Options{Environment: map[string]string{"CAPSTAN_WORKER_CIDRS": "10.0.0.0/33"}})
	require.ErrorContains(t, err, "WorkerCIDRs")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	key := map[string]string{"CAPSTAN_CONTROL_PLANE_KEY": testControlPlaneKey}
	cfg, err := parseConfig(nil, env.Options{Environment: key})
	require.NoError(t, err)
	require.NoError(t, cfg.validate(), "the defaults and a key are valid")
	require.False(t, cfg.server().ControlPlaneKey.IsZero())
	cfg, err = parseConfig(nil, env.Options{Environment: map[string]string{}})
	require.NoError(t, err)
	require.ErrorContains(t, cfg.validate(), "CAPSTAN_CONTROL_PLANE_KEY is required", "the api serves only with a key")
	cfg, err = parseConfig([]string{"migrate"}, env.Options{Environment: map[string]string{}})
	require.NoError(t, err)
	require.NoError(t, cfg.validate(), "migrate needs no key")
	cfg, err = parseConfig(nil, env.Options{Environment: map[string]string{"CAPSTAN_CONTROL_PLANE_KEY": "change-me"}})
	require.NoError(t, err)
	require.ErrorContains(t, cfg.validate(), "CAPSTAN_CONTROL_PLANE_KEY is a placeholder")
	cfg, err = parseConfig(nil, env.Options{Environment: map[string]string{"CAPSTAN_API_MAX_BODY_BYTES": "-1"}})
	require.NoError(t, err, "the env tags accept any number")
	require.ErrorContains(t, cfg.validate(), "MaxBodyBytes")
	cfg, err = parseConfig(nil, env.Options{Environment: map[string]string{
		"CAPSTAN_ADMIN_TOKEN": "compose-admin-token-change-me", "CAPSTAN_WORKER_TOKEN": "short"}})
	require.NoError(t, err)
	require.ErrorContains(t, cfg.validate(), "CAPSTAN_ADMIN_TOKEN is a placeholder")
	require.ErrorContains(t, cfg.validate(), "CAPSTAN_WORKER_TOKEN is 5 bytes")
}

// testControlPlaneKey is a CAPSTAN_CONTROL_PLANE_KEY that passes
// svc.CheckSecrets.
const testControlPlaneKey = "0123456789abcdefghijklmnopqrstuvwxyz"
