package server

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg := Config{}.withDefaults()
	require.Equal(t, Config{AbortMaxAttempts: 10, WorkerGrace: 5 * time.Second, MaxBodyBytes: 1 << 20,
		LogMaxBytes: 10 << 20, LogFollowMax: time.Hour, LogPollInterval: 5 * time.Second, RateLimit: 1000, RateBurst: 2000,
		WriteTimeout: time.Minute, IPRateLimit: 1000, IPRateBurst: 2000, TokenCacheTTL: 5 * time.Second,
		UnknownTokenTTL: 30 * time.Second, MaxStreams: 2000, MaxStreamsPerToken: 100,
		WorkerCIDRs: DefaultWorkerCIDRs}, cfg)
	require.NoError(t, cfg.validate())
	set := Config{AbortMaxAttempts: 3, WorkerGrace: time.Second, MaxBodyBytes: 10, LogMaxBytes: 5,
		LogFollowMax: time.Minute, LogPollInterval: time.Second, RateLimit: 5, RateBurst: 1, WriteTimeout: time.Second,
		IPRateLimit: 7, IPRateBurst: 2, TokenCacheTTL: time.Second, UnknownTokenTTL: time.Minute,
		MaxStreams: 9, MaxStreamsPerToken: 3,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
		WorkerCIDRs:    []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
	require.Equal(t, set, set.withDefaults(), "set fields are kept")
}

func TestConfigRejectsNegatives(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{AbortMaxAttempts: -1}, "AbortMaxAttempts"},
		{Config{WorkerGrace: -time.Second}, "WorkerGrace"},
		{Config{MaxBodyBytes: -1}, "MaxBodyBytes"},
		{Config{LogMaxBytes: -1}, "LogMaxBytes"},
		{Config{LogFollowMax: -time.Second}, "LogFollowMax"},
		{Config{IPRateLimit: -1}, "IPRateLimit"},
		{Config{UnknownTokenTTL: -time.Second}, "UnknownTokenTTL"},
		{Config{TokenCacheTTL: -time.Second}, "TokenCacheTTL"},
		{Config{UnknownTokenTTL: time.Nanosecond}, "UnknownTokenTTL"},
		{Config{MaxStreamsPerToken: -1}, "MaxStreamsPerToken"},
	}
	for _, tt := range tests {
		require.ErrorContains(t, tt.cfg.withDefaults().validate(), tt.field)
	}
}

func TestNewPanicsOnAConfigOutOfRange(t *testing.T) {
	t.Parallel()
	cfg := Config{MaxBodyBytes: -1}
	require.Error(t, cfg.Validate())
	require.PanicsWithError(t, cfg.Validate().Error(), func() { New(Deps{}, cfg) })
}
