package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkIdleExecutor measures what an idle stack costs for
// CAPSTAN_BENCH_IDLE (10s) once its one executor registered: the
// executor's CPU (utime+stime of /proc/<pid>/stat, in cores) and the Redis
// commands per second the private redis-server processed (the
// total_commands_processed delta of INFO stats, less the benchmark's own
// INFO). A MONITOR over the same window attributes the commands each
// client sent to the service holding its connection (the client's
// address, matched to the socket inodes of each process); the commands
// Lua scripts run (asynq's) count in the total but belong to no client.
// Targets: the executor ≤ 0.01 core and ≤ 10 Redis commands/s (those it
// sent; the total when the attribution found nothing).
func BenchmarkIdleExecutor(b *testing.B) {
	window := envDuration("CAPSTAN_BENCH_IDLE", 10*time.Second)
	r := benchStack(b, 1, envInt("CAPSTAN_BENCH_SLOTS", 100))
	mon := startMonitor(b, r.Redis.Opt.Addr)
	rc := redis.NewClient(&redis.Options{Addr: r.Redis.Opt.Addr, PoolSize: 1})
	defer rc.Close()
	exec := r.Proc("executor-1").Cmd.Process.Pid
	mark(b, rc, "start")
	cpu := newCPUMeter(r)
	cpu0, cmds0, start := cpuSeconds(exec), totalCommands(b, rc), time.Now()
	<-time.After(window) // the measured window: the stack left alone
	cmds1, cpu1, secs := totalCommands(b, rc), cpuSeconds(exec), time.Since(start).Seconds()
	usage := cpu.Stop()
	mark(b, rc, "stop")
	byClient := mon.countBetween(b, r.Stack, "start", "stop")
	execCores := (cpu1 - cpu0) / secs
	total := float64(cmds1-cmds0-1) / secs // less the first INFO, counted by the second
	perSec := map[string]any{}
	for who, n := range byClient {
		perSec[who] = round(float64(n)/secs, 1)
	}
	execCmds, attributed := float64(byClient["executor-1"])/secs, byClient["executor-1"] > 0
	if !attributed {
		execCmds = total
	}
	figures := map[string]any{"window_s": round(secs, 2), "executor_cores": round(execCores, 4),
		"redis_commands_per_s": round(total, 1), "redis_commands_per_s_by_client": perSec,
		"executor_redis_commands_per_s": round(execCmds, 1), "cpu": usage, "peak_rss_mib": r.PeakRSS(),
		"poll_interval": "service default (CAPSTAN_POLL_INTERVAL)", "extra_env": os.Getenv("CAPSTAN_BENCH_ENV")}
	if !attributed {
		figures["attribution"] = "no command matched the executor's connections: executor_redis_commands_per_s counts all services"
	} else {
		figures["attribution"] = "by client connection (MONITOR, addresses matched to each process's sockets); " +
			"\"lua\" is what scripts ran, counted in the total, sent by no client"
	}
	b.ReportMetric(execCores, "exec-cores")
	report(b, "idle_executor", benchResult{Title: fmt.Sprintf("Idle executor (%s after registering)", window),
		Result: fmt.Sprintf("executor %.3f core, %.0f Redis commands/s (stack total %.0f/s)", execCores, execCmds, total),
		Target: "executor ≤ 0.01 core and ≤ 10 Redis commands/s", Met: execCores <= 0.01 && execCmds <= 10,
		Figures: figures})
}

// totalCommands returns total_commands_processed from INFO stats.
func totalCommands(tb testing.TB, rc *redis.Client) int64 {
	tb.Helper()
	info, err := rc.Info(context.Background(), "stats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("INFO stats has no total_commands_processed")
	return 0
}

// mark sends ECHO capstan-bench-<label>: a line the monitor can find.
func mark(tb testing.TB, rc *redis.Client, label string) {
	tb.Helper()
	if err := rc.Echo(context.Background(), "capstan-bench-"+label).Err(); err != nil {
		tb.Fatal(err)
	}
}

// monitor holds the lines a MONITOR connection received.
type monitor struct {
	conn  net.Conn
	mu    sync.Mutex
	lines []string
}

// startMonitor opens a MONITOR connection to the Redis at addr and collects
// its lines until tb ends.
func startMonitor(tb testing.TB, addr string) *monitor {
	tb.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	m := &monitor{conn: conn}
	rd := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		tb.Fatal(err)
	}
	if ok, err := rd.ReadString('\n'); err != nil || ok != "+OK\r\n" {
		tb.Fatalf("MONITOR: %q %v", ok, err)
	}
	go func() {
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.lines = append(m.lines, line)
			m.mu.Unlock()
		}
	}()
	return m
}

// countBetween waits (at most 10 s) for the marks from and to in the
// monitor's lines and counts the commands between them by who sent them:
// a process name of the stack, "harness" (this benchmark), "lua" (commands
// scripts ran) or "unknown".
func (m *monitor) countBetween(tb testing.TB, s *Stack, from, to string) map[string]int {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		lines := append([]string(nil), m.lines...)
		m.mu.Unlock()
		i, j := markAt(lines, from), markAt(lines, to)
		if i >= 0 && j > i {
			owners := socketOwners(s)
			out := map[string]int{}
			for _, line := range lines[i+1 : j] {
				out[ownerOf(line, owners)]++
			}
			return out
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the monitor did not see the marks %s and %s", from, to)
		}
		<-time.After(10 * time.Millisecond) // the polling interval
	}
}

// markAt returns the index of the line of mark label, or -1.
func markAt(lines []string, label string) int {
	for i, l := range lines {
		if strings.Contains(l, `"capstan-bench-`+label+`"`) {
			return i
		}
	}
	return -1
}

// ownerOf names who sent a MONITOR line (`+<time> [<db> <addr>] "cmd" ...`).
func ownerOf(line string, owners map[string]string) string {
	_, rest, ok := strings.Cut(line, "[")
	if !ok {
		return "unknown"
	}
	client, _, _ := strings.Cut(rest, "]")
	_, addr, _ := strings.Cut(client, " ")
	if addr == "lua" {
		return "lua"
	}
	if o, ok := owners[addr]; ok {
		return o
	}
	return "unknown"
}

// socketOwners maps each local TCP address ("127.0.0.1:port") of the
// stack's live processes, and of this benchmark ("harness"), to the process
// name: the socket inodes of /proc/<pid>/fd matched to /proc/net/tcp.
func socketOwners(s *Stack) map[string]string {
	pids := map[string]int{"harness": os.Getpid()}
	s.mu.Lock()
	for name, p := range s.procs {
		if p.Alive() {
			pids[name] = p.Cmd.Process.Pid
		}
	}
	s.mu.Unlock()
	byInode := map[string]string{}
	for name, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			link, err := os.Readlink(dir + "/" + fd.Name())
			if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
				byInode[strings.TrimSuffix(inode, "]")] = name
			}
		}
	}
	out := map[string]string{}
	b, _ := os.ReadFile("/proc/net/tcp")
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		if name, ok := byInode[f[9]]; ok {
			if addr, ok := hexAddr(f[1]); ok {
				out[addr] = name
			}
		}
	}
	return out
}

// hexAddr decodes an IPv4 address of /proc/net/tcp ("0100007F:D431", the
// address in host byte order on little-endian machines) to "127.0.0.1:54321".
func hexAddr(s string) (string, bool) {
	ip, port, ok := strings.Cut(s, ":")
	a, err1 := strconv.ParseUint(ip, 16, 32)
	p, err2 := strconv.ParseUint(port, 16, 16)
	if !ok || err1 != nil || err2 != nil {
		return "", false
	}
	return fmt.Sprintf("%d.%d.%d.%d:%d", a&0xff, a>>8&0xff, a>>16&0xff, a>>24, p), true
}
