package main

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
	"github.com/stretchr/testify/require"
)

func parse(t *testing.T, vars map[string]string) Config {
	t.Helper()
	if vars == nil {
		vars = map[string]string{} // never the process's environment
	}
	cfg, err := env.ParseAsWithOptions[Config](env.Options{Environment: vars})
	require.NoError(t, err)
	return cfg
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg := parse(t, map[string]string{})
	require.Equal(t, "http://127.0.0.1:8080", cfg.APIURL)
	require.Equal(t, "127.0.0.1:56379", cfg.RedisAddr)
	require.Equal(t, "127.0.0.1:0", cfg.Addr)
	require.Equal(t, 4, cfg.Slots)
	require.Equal(t, "./.data/executor", cfg.DataDir)
	require.Equal(t, time.Second, cfg.HeartbeatInterval)
	require.Equal(t, time.Second, cfg.PollInterval)
	require.Equal(t, 10*time.Minute, cfg.SweepInterval)
	require.Zero(t, cfg.KillGrace, "unset: the supervisor's default, domain.DefaultKillGrace; a spec's kill_grace_ms wins")
	require.Equal(t, "auto", cfg.ContainerRuntime)
	require.Empty(t, cfg.HTTPAllow, "the http plugin reaches no loopback or link-local target")
	require.Equal(t, 5*time.Minute, cfg.HTTPTimeout)
	require.Equal(t, 64<<10, cfg.LogLimit)
	require.Empty(t, cfg.Labels)
	require.False(t, cfg.Insecure, "attempts are sandboxed unless told otherwise")
	require.Equal(t, sandbox.DefaultUIDs, cfg.UIDRange)
	require.Equal(t, sandbox.DefaultRunGIDs, cfg.RunGIDRange)
	require.Equal(t, sandbox.DefaultLockDir, cfg.LockDir)
	require.Equal(t, sandbox.DefaultMaxProcs, cfg.AttemptProcs)
	require.Equal(t, "auto", cfg.Cgroups)
	require.Empty(t, cfg.PassEnv)
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Regexp(t, "^"+host+`-\d+$`, cfg.workerName())
}

func TestConfigParsesLabelsAndDurations(t *testing.T) {
	t.Parallel()
	cfg := parse(t, map[string]string{"CAPSTAN_EXECUTOR_LABELS": "zone=a,gpu=none", "CAPSTAN_KILL_GRACE": "500ms",
		"CAPSTAN_EXECUTOR_NAME": "exec-1", "CAPSTAN_LOG_LIMIT": "1024"})
	require.Equal(t, map[string]string{"zone": "a", "gpu": "none"}, cfg.Labels)
	require.Equal(t, 500*time.Millisecond, cfg.KillGrace)
	require.Equal(t, "exec-1", cfg.workerName())
	require.Equal(t, 1024, cfg.LogLimit)

	cfg = parse(t, map[string]string{"CAPSTAN_EXECUTOR_UID_RANGE": "300000-300999", "CAPSTAN_EXECUTOR_PASS_ENV": "HTTP_PROXY,NO_PROXY",
		"CAPSTAN_EXECUTOR_INSECURE": "1"})
	require.Equal(t, sandbox.Range{First: 300000, Last: 300999}, cfg.UIDRange)
	require.Equal(t, []string{"HTTP_PROXY", "NO_PROXY"}, cfg.PassEnv)
	require.True(t, cfg.Insecure)
	_, err := env.ParseAsWithOptions[Config](env.Options{Environment: map[string]string{"CAPSTAN_EXECUTOR_UID_RANGE": "5"}})
	require.ErrorContains(t, err, "first-last")
}

func TestAdvertiseURL(t *testing.T) {
	t.Parallel()
	host, err := os.Hostname()
	require.NoError(t, err)
	tests := []struct {
		name string
		vars map[string]string
		addr string
		want string
	}{
		{"listen host and actual port", nil, "127.0.0.1:41234", "http://127.0.0.1:41234"},
		{"all interfaces", nil, "0.0.0.0:9090", "http://127.0.0.1:9090"},
		{"ipv6", nil, "[::1]:9090", "http://[::1]:9090"},
		{"hostname", map[string]string{"CAPSTAN_EXECUTOR_ADVERTISE_HOST_FROM_HOSTNAME": "true"}, "0.0.0.0:9090",
			"http://" + host + ":9090"},
		{"explicit", map[string]string{"CAPSTAN_EXECUTOR_ADVERTISE_URL": "http://10.1.2.3:9090"}, "0.0.0.0:9090",
			"http://10.1.2.3:9090"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr, err := net.ResolveTCPAddr("tcp", tt.addr)
			require.NoError(t, err)
			got, err := parse(t, tt.vars).advertiseURL(addr)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDrainAndResourceDefaults(t *testing.T) {
	t.Parallel()
	cfg := parse(t, nil)
	require.Equal(t, 60*time.Second, cfg.DrainTimeout)
	res := cfg.resources()
	require.Equal(t, int64(runtime.NumCPU())*1000, *res.CpuMillis)
	if res.MemoryBytes != nil {
		require.Positive(t, *res.MemoryBytes)
	}

	cfg = parse(t, map[string]string{"CAPSTAN_EXECUTOR_CPU_MILLIS": "1500", "CAPSTAN_EXECUTOR_MEMORY_BYTES": "1073741824",
		"CAPSTAN_DRAIN_TIMEOUT": "2s"})
	res = cfg.resources()
	require.Equal(t, int64(1500), *res.CpuMillis)
	require.Equal(t, int64(1<<30), *res.MemoryBytes)
	require.Equal(t, 2*time.Second, cfg.DrainTimeout)
}

func TestHostMemory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	meminfo := write("meminfo", "MemTotal:       16318412 kB\nMemFree:         1000000 kB\n")
	tests := []struct {
		name, meminfo, max string
		want               int64
	}{
		{"MemTotal", meminfo, filepath.Join(dir, "none"), 16318412 * 1024},
		{"a lower cgroup limit wins", meminfo, write("lower", "1073741824\n"), 1 << 30},
		{"an unlimited cgroup is ignored", meminfo, write("max", "max\n"), 16318412 * 1024},
		{"a higher cgroup limit is ignored", meminfo, write("higher", "99999999999999\n"), 16318412 * 1024},
		{"unknown", filepath.Join(dir, "none"), filepath.Join(dir, "none"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, hostMemory(tt.meminfo, tt.max))
		})
	}
}

// CAPSTAN_EXECUTOR_RUN_AS is uid:gid; anything else fails the environment.
func TestRunAs(t *testing.T) {
	t.Parallel()
	cfg := parse(t, map[string]string{"CAPSTAN_EXECUTOR_RUN_AS": "10002:10003",
		"CAPSTAN_WORKER_TOKEN": "w", "CAPSTAN_EXECUTOR_METRICS_TOKEN": "m"})
	require.Equal(t, &runner.Credential{UID: 10002, GID: 10003}, cfg.RunAs)
	require.Equal(t, "w", cfg.WorkerToken)
	require.Equal(t, "m", cfg.MetricsToken)
	require.Nil(t, parse(t, nil).RunAs, "unset: the executor's own user")
	_, err := env.ParseAsWithOptions[Config](env.Options{Environment: map[string]string{"CAPSTAN_EXECUTOR_RUN_AS": "nobody"}})
	require.ErrorContains(t, err, "uid:gid")
}

// An allow list that does not parse stops the executor, naming the item.
func TestBadHTTPAllowStopsTheExecutor(t *testing.T) {
	t.Parallel()
	cfg := parse(t, map[string]string{"CAPSTAN_CONTAINER_RUNTIME": "none", "CAPSTAN_HTTP_ALLOW": "127.0.0.1/8,10.0.0.0/99"})
	_, err := newPlugins(cfg, nil, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, `"10.0.0.0/99" is not a CIDR`)
	cfg.HTTPAllow = "127.0.0.1/8"
	_, err = newPlugins(cfg, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
}
