package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// sentinelMaster is the master name the test's sentinel monitors.
const sentinelMaster = "capstan-e2e"

// TestRedisSentinel runs the four services against a real redis-sentinel
// (Debian's package, which scripts/dev-deps.sh installs) monitoring a
// private Redis master: the services get CAPSTAN_REDIS_SENTINELS and
// CAPSTAN_REDIS_MASTER, and a CAPSTAN_REDIS_ADDR where nothing listens, so
// the run can only succeed through the sentinel.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	master, sentinel := startSentinel(t)
	s := Start(t, bins, Options{
		Redis: asynq.RedisClientOpt{Addr: master},
		Env: []string{
			"CAPSTAN_REDIS_SENTINELS=" + sentinel,
			"CAPSTAN_REDIS_MASTER=" + sentinelMaster,
			fmt.Sprintf("CAPSTAN_REDIS_ADDR=127.0.0.1:%d", FreePort(t)),
		},
	})
	name := create(t, s, api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "hello", Command: ptr(`echo "hello $CAPSTAN_TASK_INDEX"`), Replicas: ptr(2)},
		{Name: "done", Command: ptr("echo done"), DependsOn: &[]string{"hello"}},
	}})
	waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
	require.Equal(t, "done\n", logs(t, s, name, "done", 0, 1))

	rc := redis.NewClient(&redis.Options{Addr: master})
	defer rc.Close()
	queues, err := rc.SMembers(context.Background(), "asynq:queues").Result()
	require.NoError(t, err)
	require.NotEmpty(t, queues, "the services' queues are on the master the sentinel named")
}

// startSentinel starts a private redis-server and a redis-sentinel that
// monitors it as sentinelMaster, both on free loopback ports and stopped
// when t ends, and returns their addresses once the sentinel names the
// master.
func startSentinel(t *testing.T) (master, sentinel string) {
	t.Helper()
	bin, args := sentinelCommand(t)
	dir := t.TempDir()
	masterPort, sentinelPort := FreePort(t), FreePort(t)
	master = net.JoinHostPort("127.0.0.1", strconv.Itoa(masterPort))
	sentinel = net.JoinHostPort("127.0.0.1", strconv.Itoa(sentinelPort))
	startDaemon(t, filepath.Join(dir, "redis.log"), "redis-server", "--bind", "127.0.0.1",
		"--port", strconv.Itoa(masterPort), "--dir", dir, "--save", "", "--appendonly", "no")

	// A sentinel rewrites its configuration file, so it gets its own.
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, "bind 127.0.0.1\nport %d\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 5000\n",
		sentinelPort, dir, sentinelMaster, masterPort, sentinelMaster), 0o600))
	startDaemon(t, filepath.Join(dir, "sentinel.log"), bin, append([]string{conf}, args...)...)

	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		addr, err := sc.GetMasterAddrByName(context.Background(), sentinelMaster).Result()
		if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == master {
			return master, sentinel
		}
		require.Truef(t, time.Now().Before(deadline), "the sentinel on %s did not name %s (last: %v, %v)", sentinel, master, addr, err)
		<-time.After(50 * time.Millisecond) // the polling interval
	}
}

// sentinelCommand returns how to run a sentinel: Debian's redis-sentinel,
// else redis-server in sentinel mode (the same program).
func sentinelCommand(t *testing.T) (string, []string) {
	t.Helper()
	if path, err := exec.LookPath("redis-sentinel"); err == nil {
		return path, nil
	}
	path, err := exec.LookPath("redis-server")
	require.NoError(t, err, "no redis-sentinel nor redis-server: run scripts/dev-deps.sh start")
	return path, []string{"--sentinel"}
}

// startDaemon runs a command in the foreground of its own process, logging
// to logPath, and kills it when t ends.
func startDaemon(t *testing.T, logPath, bin string, args ...string) {
	t.Helper()
	f, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start(), "start %s", bin)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
		if t.Failed() {
			t.Logf("---- %s (tail) ----\n%s", filepath.Base(logPath), tail(logPath, 30))
		}
	})
}
