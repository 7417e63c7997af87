// Package redistest gives each test a Redis database of its own on the
// server scripts/dev-deps.sh starts (CAPSTAN_TEST_REDIS_ADDR, default
// DefaultAddr). asynq has no key prefix, so a database number is the unit of
// isolation.
//
// New leases a database that no other test holds, in this process or any
// other go test process on the same server: the lease is the key
// capstan:redistest:db:<n> in database 0, set with NX and a TTL of 30 s
// that is renewed while the test runs, and deleted when it ends. A process
// killed mid-test leaves a lease that expires on its own. Database 0 holds
// only the leases and is never handed out, so a server with the default 16
// databases serves 15 tests at once; scripts/dev-deps.sh starts Redis with
// 64. When every database is leased, New waits for one to come free.
//
// A client that picks a database number itself (a service on its default 0,
// a test not yet on New) is not kept out by the leases; New hands out the
// highest free number first so that such a client meets a test last.
package redistest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// DefaultAddr is the dev-deps Redis, used when CAPSTAN_TEST_REDIS_ADDR is
// unset.
const DefaultAddr = "127.0.0.1:56379"

// Addr returns the host:port of the test Redis: CAPSTAN_TEST_REDIS_ADDR, or
// DefaultAddr.
func Addr() string { return cmp.Or(os.Getenv("CAPSTAN_TEST_REDIS_ADDR"), DefaultAddr) }

const (
	// leasePrefix, followed by the database number, is a lease's key in
	// database 0.
	leasePrefix = "capstan:redistest:db:"
	// leaseTTL is how long a lease outlives its last renewal: how long the
	// database of a killed process stays unusable.
	leaseTTL = 30 * time.Second
	// renewEvery is how often a held lease is renewed.
	renewEvery = leaseTTL / 3
	// waitFree is how long New waits for a database to come free, and
	// retryEvery how often it looks.
	waitFree, retryEvery = 5 * time.Minute, 50 * time.Millisecond
	// fallbackDatabases is the count assumed when CONFIG GET is refused:
	// Redis's default.
	fallbackDatabases = 16
)

// New leases a Redis database for t, flushes it, and returns the asynq
// options to reach it. When t ends (after the cleanups t registered later,
// so clients built on the options are closed first) the database is flushed
// again and its lease released; t fails if the lease was lost meanwhile.
// New fails t when Redis does not answer or no database comes free within
// waitFree.
func New(t testing.TB) asynq.RedisClientOpt {
	t.Helper()
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: Addr()})
	l := &lease{rc: rc, token: fmt.Sprintf("%s pid %d %s", t.Name(), os.Getpid(), uuid.NewString())}
	db, err := l.acquire(ctx)
	if err != nil {
		rc.Close()
		t.Fatalf("redistest: %v (is scripts/dev-deps.sh start running?)", err)
	}
	l.db = db
	opt := asynq.RedisClientOpt{Addr: Addr(), DB: db}
	if err := flush(ctx, opt); err != nil {
		l.release(ctx)
		rc.Close()
		t.Fatalf("redistest: %v", err)
	}
	stop, renewed := make(chan struct{}), make(chan error, 1)
	go func() { renewed <- l.keep(stop) }()
	t.Cleanup(func() {
		defer rc.Close()
		close(stop)
		if err := <-renewed; err != nil {
			t.Errorf("redistest: %v", err)
			return // the database may be another test's now: leave it
		}
		if err := flush(ctx, opt); err != nil {
			t.Errorf("redistest: %v", err)
		}
		l.release(ctx)
	})
	return opt
}

// lease is one test's hold on database db, the key leasePrefix+db whose
// value is token.
type lease struct {
	rc    *redis.Client
	token string
	db    int
}

// claim sets the first free lease key among KEYS to ARGV[1] with a TTL of
// ARGV[2] ms and returns its position in KEYS (from 1), or 0 when all are
// held.
var claim = redis.NewScript(`
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2]) then return i end
end
return 0`)

// renew extends the lease KEYS[1] by ARGV[2] ms if ARGV[1] still holds it.
var renew = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)

// drop deletes the lease KEYS[1] if ARGV[1] still holds it.
var drop = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// acquire claims the highest free database (see the package doc for why),
// waiting up to waitFree while all are held.
func (l *lease) acquire(ctx context.Context) (int, error) {
	n, err := databases(ctx, l.rc)
	if err != nil {
		return 0, err
	}
	keys := make([]string, n-1) // keys[i] leases database n-1-i
	for i := range keys {
		keys[i] = leasePrefix + strconv.Itoa(n-1-i)
	}
	deadline := time.NewTimer(waitFree)
	defer deadline.Stop()
	tick := time.NewTicker(retryEvery)
	defer tick.Stop()
	for {
		pos, err := claim.Run(ctx, l.rc, keys, l.token, leaseTTL.Milliseconds()).Int()
		if err != nil {
			return 0, fmt.Errorf("lease a database: %w", err)
		}
		if pos > 0 {
			return n - pos, nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return 0, fmt.Errorf("all %d databases stayed leased for %s (keys %s*)", n-1, waitFree, leasePrefix)
		}
	}
}

// keep renews the lease until stop is closed; it returns an error if the
// lease was lost (it expired, and another test may have taken the database).
func (l *lease) keep(stop <-chan struct{}) error {
	tick := time.NewTicker(renewEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
		ok, err := renew.Run(context.Background(), l.rc, []string{l.key()}, l.token, leaseTTL.Milliseconds()).Int()
		if err == nil && ok == 0 {
			return fmt.Errorf("lost the lease on database %d", l.db)
		}
		// A failed renewal is tried again at the next tick, well within leaseTTL.
	}
}

// release gives the database back, if this lease still holds it.
func (l *lease) release(ctx context.Context) {
	_ = drop.Run(ctx, l.rc, []string{l.key()}, l.token).Err()
}

func (l *lease) key() string { return leasePrefix + strconv.Itoa(l.db) }

// databases returns the server's database count (CONFIG GET databases), or
// fallbackDatabases when the server refuses CONFIG.
func databases(ctx context.Context, rc *redis.Client) (int, error) {
	if err := rc.Ping(ctx).Err(); err != nil {
		return 0, fmt.Errorf("redis at %s: %w", rc.Options().Addr, err)
	}
	cfg, err := rc.ConfigGet(ctx, "databases").Result()
	if err != nil {
		return fallbackDatabases, nil
	}
	n, err := strconv.Atoi(cfg["databases"])
	if err != nil {
		return 0, fmt.Errorf("CONFIG GET databases: %q: %w", cfg["databases"], err)
	}
	if n < 2 {
		return 0, errors.New("redis has no database besides 0 to hand out")
	}
	return n, nil
}

// flush empties the database of opt.
func flush(ctx context.Context, opt asynq.RedisClientOpt) error {
	rc := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: opt.DB})
	defer rc.Close()
	if err := rc.FlushDB(ctx).Err(); err != nil {
		return fmt.Errorf("flush database %d: %w", opt.DB, err)
	}
	return nil
}
