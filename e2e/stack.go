// Package e2e starts Capstan's four services as real processes against the
// real Postgres and Redis of scripts/dev-deps.sh and drives them over HTTP.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Proc is one running service process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string
	done chan struct{}
}

// Alive reports whether the process has not exited.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// SharedDir returns a new directory that the test and every task may read
// and write (0777), on a path a task sees: under the data directory, which
// a sandboxed attempt keeps on its path while its /tmp is its own. Each
// task is a user of its own: one may replace another's files there, but
// not write into them (make a file per task instead).
func (s *Stack) SharedDir() string {
	s.t.Helper()
	parent := filepath.Join(s.DataDir, "shared")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		s.t.Fatal(err)
	}
	dir, err := os.MkdirTemp(parent, "dir")
	if err == nil {
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return dir
}

// Sandboxed reports whether the stack's executors sandbox their attempts:
// only root may (a test user runs them with CAPSTAN_EXECUTOR_INSECURE=1).
func Sandboxed() bool { return os.Geteuid() == 0 }

// Stack is one Capstan deployment: api, scheduler, abort-reconciler and
// executors, sharing a fresh database and Redis DB.
type Stack struct {
	t       testing.TB
	bins    Binaries
	env     []string
	dir     string
	APIURL  string
	DataDir string
	DBURL   string
	// RedisDB is the stack's Redis database: one redistest leases to the
	// test, or Options.Redis's.
	RedisDB int
	// RedisAddr is the stack's Redis server, host:port.
	RedisAddr string
	// Client is an api client that carries Token.
	Client *api.ClientWithResponses
	// Token is the stack's admin bearer secret (CAPSTAN_ADMIN_TOKEN);
	// WorkerToken the executors register with (CAPSTAN_WORKER_TOKEN);
	// MetricsToken the executors' /metrics requires
	// (CAPSTAN_EXECUTOR_METRICS_TOKEN). Each is new per stack.
	Token, WorkerToken, MetricsToken string
	// ControlPlaneKey is the control plane's CAPSTAN_CONTROL_PLANE_KEY,
	// which each worker's secrets derive from (ExecutorCredential). New
	// per stack.
	ControlPlaneKey workerkey.Key

	opts Options

	mu    sync.Mutex
	procs map[string]*Proc
	store *store.Store
}

// Options change a stack's settings.
type Options struct {
	// Executors to start. Default 2.
	Executors int
	// Env adds or overrides variables for every service.
	Env []string
	// ExecutorEnv, when set, adds or overrides variables for executor i
	// (from 1), after Env: e.g. CAPSTAN_EXECUTOR_ADDR and
	// CAPSTAN_EXECUTOR_ADVERTISE_URL to put a proxy in front of it.
	ExecutorEnv func(i int) []string
	// ServiceEnv, when set, adds or overrides variables for the service
	// named name (api, scheduler, abort-reconciler, executor-<i>), last.
	ServiceEnv func(name string) []string
	// Defaults, when true, leaves the services their own defaults (ticks,
	// resync periods, heartbeats, backoffs, queue polling, log level) instead
	// of the shortened ones tests use (see testEnv).
	Defaults bool
	// Redis, when its Addr is set, is the Redis server and database the
	// stack uses (flushed first) instead of a database redistest leases on
	// the test Redis: the benchmarks run their own server.
	Redis asynq.RedisClientOpt
	// DatabaseURL, when set, is the migrated database the stack uses
	// instead of a fresh one on the test Postgres: a test that pauses
	// Postgres gives its own (StartPostgres).
	DatabaseURL string
}

// testEnv are the settings tests run the services with: debug logs, and
// durations shrunk so that what a test waits for happens soon.
var testEnv = []string{
	"CAPSTAN_LOG_LEVEL=debug",
	"CAPSTAN_SCHEDULER_TICK=100ms",
	"CAPSTAN_RESYNC_PERIOD=2s",
	"CAPSTAN_DISPATCH_GRACE=3s",
	// Race-built binaries (and the attempt shim they re-exec) sleep 1 s at
	// exit by default.
	"GORACE=atexit_sleep_ms=0",
	"CAPSTAN_RETRY_INITIAL_DELAY=50ms",
	"CAPSTAN_RETRY_MAX_DELAY=200ms",
	"CAPSTAN_HEARTBEAT_INTERVAL=300ms",
	"CAPSTAN_WORKER_GRACE=3s",
	"CAPSTAN_DRAIN_TIMEOUT=1s", // SIGTERM at teardown: do not wait for running tasks
	"ABORT_INITIAL_DELAY=50ms",
	"ABORT_MAX_DELAY=500ms",
	"ABORT_RESYNC_PERIOD=2s",
	// Executors learn of attempts from their wake lists; their queue's poll
	// (1s by default) is a fallback, but asynq's shutdown waits out the
	// poll's sleep, which teardowns and restarts should not.
	"CAPSTAN_POLL_INTERVAL=200ms",
}

// Start brings a stack up and waits until the api is ready and every
// executor has registered; it is torn down when t ends.
func Start(t testing.TB, bins Binaries, o Options) *Stack {
	t.Helper()
	if o.Executors == 0 {
		o.Executors = 2
	}
	dir := t.TempDir()
	// Sandboxed attempts, each a user of its own, pass through the test's
	// temporary directory (0700) to the data directory.
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	rdb := o.Redis
	if rdb.Addr == "" {
		rdb = redistest.New(t)
	}
	dbURL := o.DatabaseURL
	if dbURL == "" {
		dbURL = storetest.NewURL(t)
	}
	s := &Stack{t: t, bins: bins, dir: dir, DataDir: filepath.Join(dir, "data"), DBURL: dbURL,
		RedisDB: rdb.DB, RedisAddr: rdb.Addr, procs: map[string]*Proc{}, opts: o}
	if o.Redis.Addr != "" {
		s.FlushRedis() // redistest flushes the databases it leases
	}
	s.Token, s.WorkerToken, s.MetricsToken = store.NewTokenSecret(), store.NewTokenSecret(), store.NewTokenSecret()
	key := store.NewTokenSecret()
	s.ControlPlaneKey = workerkey.New(key)
	s.env = []string{
		"CAPSTAN_CONTROL_PLANE_KEY=" + key,
		"CAPSTAN_ADMIN_TOKEN=" + s.Token,
		"CAPSTAN_WORKER_TOKEN=" + s.WorkerToken,
		"CAPSTAN_EXECUTOR_METRICS_TOKEN=" + s.MetricsToken,
		"CAPSTAN_DATABASE_URL=" + s.DBURL,
		"CAPSTAN_REDIS_ADDR=" + s.RedisAddr,
		fmt.Sprintf("CAPSTAN_REDIS_DB=%d", s.RedisDB),
		"CAPSTAN_DATA_DIR=" + s.DataDir,
	}
	if !Sandboxed() {
		s.env = append(s.env, "CAPSTAN_EXECUTOR_INSECURE=1") // only root may sandbox attempts
	}
	if !o.Defaults {
		s.env = append(s.env, testEnv...)
	}
	s.env = append(s.env, o.Env...)
	t.Cleanup(s.stopAll)
	// The api binds a port of the kernel's choosing, so no other process can
	// take it between a pick and the bind; restarts reuse it.
	addr := s.startAPIOnAnyPort("api")
	s.APIURL = "http://" + addr
	s.env = append(s.env, "CAPSTAN_API_ADDR="+addr, "CAPSTAN_API_URL="+s.APIURL)
	s.StartService("scheduler")
	s.StartService("abort-reconciler")
	for i := 1; i <= o.Executors; i++ {
		s.StartExecutor(i)
	}
	s.Client = s.NewClient(s.APIURL)
	s.AwaitReady(s.APIURL, 15*time.Second)
	s.Eventually(15*time.Second, "executors registered", func() bool {
		return s.AliveWorkers() >= o.Executors
	})
	return s
}

// NewClient returns a client of the api at url that carries Token, with
// opts (e.g. api.WithHTTPClient).
func (s *Stack) NewClient(url string, opts ...api.ClientOption) *api.ClientWithResponses {
	opts = append(opts, api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		s.Authorize(req)
		return nil
	}))
	c, err := api.NewClientWithResponses(url, opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// Authorize sets the admin token on a raw request to the api.
func (s *Stack) Authorize(req *http.Request) {
	req.Header.Set("Authorization", "Bearer "+s.Token)
}

// ExecutorCredential is the credential worker id's executor API requires,
// as the control plane derives it: what the abort reconciler sends it.
func (s *Stack) ExecutorCredential(id string) string { return s.ControlPlaneKey.Credential(id) }

// AliveWorkers counts workers the api reports alive.
func (s *Stack) AliveWorkers() int {
	resp, err := s.Client.ListWorkersWithResponse(context.Background())
	if err != nil || resp.JSON200 == nil {
		return 0
	}
	n := 0
	for _, w := range resp.JSON200.Workers {
		if w.State == api.WorkerStateAlive {
			n++
		}
	}
	return n
}

// StartService starts (or restarts) a service by name: api, scheduler,
// abort-reconciler, or one of them with a replica suffix ("scheduler-2"),
// or executor-<i>.
func (s *Stack) StartService(name string, extraEnv ...string) *Proc {
	bin := serviceOf(name)
	env := append([]string{}, extraEnv...)
	switch bin {
	case "scheduler", "abort-reconciler":
		env = append(env, "CAPSTAN_METRICS_ADDR=127.0.0.1:0") // read it with LoggedAddr
	}
	if s.opts.ServiceEnv != nil {
		env = append(env, s.opts.ServiceEnv(name)...)
	}
	return s.start(name, s.bins.Path(bin), env)
}

// serviceOf returns the service a process name runs: the name less a
// "-<n>" replica suffix.
func serviceOf(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

// StartAPI starts api replica i (from 2; the first is "api") on a port of
// its own, beside the first on the same database and Redis, and returns its
// base URL once it is ready.
func (s *Stack) StartAPI(i int) string {
	s.t.Helper()
	url := "http://" + s.startAPIOnAnyPort(fmt.Sprintf("api-%d", i))
	s.AwaitReady(url, 15*time.Second)
	return url
}

// AwaitReady waits up to timeout until the api at url answers /readyz with
// 200.
func (s *Stack) AwaitReady(url string, timeout time.Duration) {
	s.t.Helper()
	s.Eventually(timeout, "api at "+url+" ready", func() bool {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// Proc returns the process last started under name, or nil.
func (s *Stack) Proc(name string) *Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[name]
}

// StartExecutor starts executor number i, with Options.ExecutorEnv(i).
func (s *Stack) StartExecutor(i int) *Proc {
	name := fmt.Sprintf("executor-%d", i)
	env := []string{"CAPSTAN_EXECUTOR_NAME=" + name, "CAPSTAN_EXECUTOR_ADDR=127.0.0.1:0",
		"CAPSTAN_ID_FILE=" + filepath.Join(s.dir, name+".id")}
	if s.opts.ExecutorEnv != nil {
		env = append(env, s.opts.ExecutorEnv(i)...)
	}
	return s.StartService(name, env...)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int { return freePort(t) }

// RedisOpt is the stack's own Redis database, for asynq clients and
// inspectors in tests.
func (s *Stack) RedisOpt() asynq.RedisClientOpt {
	return asynq.RedisClientOpt{Addr: s.RedisAddr, DB: s.RedisDB}
}

// FlushRedis wipes the stack's Redis database (FLUSHDB: the stack's whole
// Redis, without touching the databases of tests running beside it).
func (s *Stack) FlushRedis() {
	s.t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: s.RedisAddr, DB: s.RedisDB})
	defer rc.Close()
	if err := rc.FlushDB(context.Background()).Err(); err != nil {
		s.t.Fatalf("flush redis db %d: %v", s.RedisDB, err)
	}
}

// Store returns a Store on the stack's database (opened once), to read what
// the API does not show.
func (s *Stack) Store() *store.Store {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.store == nil {
		st, err := store.Open(context.Background(), s.DBURL, store.Config{MaxOpenConns: 4})
		if err != nil {
			s.t.Fatalf("open store: %v", err)
		}
		s.store = st
		s.t.Cleanup(func() { st.Close() })
	}
	return s.store
}

func (s *Stack) start(name, bin string, extra []string) *Proc {
	s.t.Helper()
	logPath := filepath.Join(s.dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), s.env...), extra...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	s.mu.Lock()
	s.procs[name] = p
	s.mu.Unlock()
	return p
}

// Kill sends SIGKILL to a service (kill -9) and waits for it to exit.
func (s *Stack) Kill(name string) {
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (s *Stack) stopAll() {
	s.mu.Lock()
	procs := make([]*Proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	if s.t.Failed() {
		for _, p := range procs {
			s.t.Logf("---- %s log (tail) ----\n%s", p.Name, tail(p.Log, 60))
		}
	}
}

// Eventually polls cond every 50ms until it holds or timeout passes.
func (s *Stack) Eventually(timeout time.Duration, what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-time.After(50 * time.Millisecond) // the polling interval
	}
}
