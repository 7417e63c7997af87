package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// childEnv makes the test binary lease a database in TestLeaseHolder, print
// its number and hold it until its stdin closes.
const childEnv = "REDISTEST_LEASE_HOLDER"

func client(t *testing.T, db int) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: Addr(), DB: db})
	t.Cleanup(func() { rc.Close() })
	return rc
}

// Leases held at once name distinct databases, never 0, each empty and
// leased under its number, and writes to one are not seen in another.
func TestNewHandsOutDistinctEmptyDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seen := map[int]bool{}
	for i := range 3 {
		opt := New(t)
		require.Equal(t, Addr(), opt.Addr)
		require.NotZero(t, opt.DB, "database 0 holds the leases")
		require.False(t, seen[opt.DB], "database %d handed out twice", opt.DB)
		seen[opt.DB] = true
		rc := client(t, opt.DB)
		n, err := rc.DBSize(ctx).Result()
		require.NoError(t, err)
		require.Zero(t, n, "database %d is flushed before use", opt.DB)
		require.NoError(t, rc.Set(ctx, "owner", i, 0).Err())
		holder, err := client(t, 0).Get(ctx, leasePrefix+strconv.Itoa(opt.DB)).Result()
		require.NoError(t, err)
		require.Contains(t, holder, t.Name())
	}
	for db := range seen {
		n, err := client(t, db).DBSize(ctx).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "database %d holds only its own test's key", db)
	}
}

// When the test ends its lease is released: the key no longer holds its
// token.
func TestNewReleasesWhenTheTestEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var key, token string
	t.Run("holder", func(t *testing.T) {
		key = leasePrefix + strconv.Itoa(New(t).DB)
		var err error
		token, err = client(t, 0).Get(ctx, key).Result()
		require.NoError(t, err)
	})
	holder, err := client(t, 0).Get(ctx, key).Result()
	if !errors.Is(err, redis.Nil) { // absent, or another test has leased it since
		require.NoError(t, err)
		require.NotEqual(t, token, holder)
	}
}

// Two go test processes leasing at once get different databases.
func TestNewIsExclusiveAcrossProcesses(t *testing.T) {
	t.Parallel()
	var dbs []int
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHolder$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"=1", "GORACE=atexit_sleep_ms=0")
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			stdin.Close()
			require.NoError(t, cmd.Wait())
		})
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err)
		db, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "db "))
		require.NoError(t, err, line)
		dbs = append(dbs, db)
	}
	require.NotEqual(t, dbs[0], dbs[1], "two processes hold the same database")
}

// TestLeaseHolder is the child of TestNewIsExclusiveAcrossProcesses.
func TestLeaseHolder(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("run by TestNewIsExclusiveAcrossProcesses")
	}
	fmt.Printf("db %d\n", New(t).DB)
	_, _ = io.Copy(io.Discard, os.Stdin) // hold the lease until the parent closes stdin
}
