package sandbox_test

import (
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { proctest.Main(m) }

func TestParseRange(t *testing.T) {
	t.Parallel()
	r, err := sandbox.ParseRange("100000-165535")
	require.NoError(t, err)
	require.Equal(t, sandbox.Range{First: 100000, Last: 165535}, r)
	require.Equal(t, 65536, r.Size())
	require.Equal(t, "100000-165535", r.String())
	for _, bad := range []string{"", "100000", "5-4", "0-10", "a-b", "1-2-3", "1-99999999999"} {
		_, err := sandbox.ParseRange(bad)
		require.Error(t, err, bad)
	}
	require.True(t, sandbox.Range{First: 1, Last: 5}.Overlaps(sandbox.Range{First: 5, Last: 9}))
	require.False(t, sandbox.Range{First: 1, Last: 4}.Overlaps(sandbox.Range{First: 5, Last: 9}))
}

// TestLeasesNeverHandOneUIDToTwoAttempts: two allocators of one lock
// directory (two executors of a host) lease uids from a range smaller than
// the attempts that want them, concurrently: no uid is ever held twice, and
// an allocator whose range is all held says so.
func TestLeasesNeverHandOneUIDToTwoAttempts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	uids := sandbox.Range{First: 200000, Last: 200007}
	a, err := sandbox.NewLeases(dir, uids)
	require.NoError(t, err)
	b, err := sandbox.NewLeases(dir, uids)
	require.NoError(t, err)

	var mu sync.Mutex
	held := map[uint32]bool{}
	var doubled []uint32
	var wg sync.WaitGroup
	for i := range 16 {
		leases := []*sandbox.Leases{a, b}[i%2]
		wg.Go(func() {
			for range 200 {
				l, err := leases.Acquire()
				if err != nil {
					require.ErrorIs(t, err, sandbox.ErrExhausted)
					continue
				}
				mu.Lock()
				if held[l.UID] {
					doubled = append(doubled, l.UID)
				}
				held[l.UID] = true
				mu.Unlock()
				for range 10 { // hold it a while, as an attempt does
					runtime.Gosched()
				}
				mu.Lock()
				delete(held, l.UID) // before the release: a later lease may take it at once
				mu.Unlock()
				l.Release(true)
			}
		})
	}
	wg.Wait()
	require.Zero(t, len(doubled), "uids leased twice at once, e.g. %v", doubled[:min(len(doubled), 5)])

	var all []*sandbox.Lease
	for range uids.Size() {
		l, err := []*sandbox.Leases{a, b}[len(all)%2].Acquire()
		require.NoError(t, err)
		all = append(all, l)
	}
	_, err = a.Acquire()
	require.ErrorIs(t, err, sandbox.ErrExhausted)
	all[3].Release(true)
	l, err := b.Acquire()
	require.NoError(t, err)
	require.Equal(t, all[3].UID, l.UID, "a released uid is leased again")
}

// TestMarkedLeaseWaitsForTheContainer: a uid a container ran as, whose
// lease ended without its removal, is not leased while a process runs as
// it.
func TestMarkedLeaseWaitsForTheContainer(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("running a process as another user needs root")
	}
	uids := sandbox.Range{First: 200100, Last: 200100}
	leases, err := sandbox.NewLeases(t.TempDir(), uids)
	require.NoError(t, err)
	l, err := leases.Acquire()
	require.NoError(t, err)
	require.NoError(t, l.MarkContainer())
	p, err := runner.Start(runner.Spec{Command: "exec sleep 600", Dir: "/",
		RunAs: &runner.Credential{UID: l.UID, GID: l.UID}})
	require.NoError(t, err)
	l.Release(false) // the executor died: the container still runs as the uid
	_, err = leases.Acquire()
	require.ErrorIs(t, err, sandbox.ErrExhausted, "a process still runs as the only uid")

	require.NoError(t, p.Kill(0))
	p.Wait()
	again, err := leases.Acquire()
	require.NoError(t, err)
	again.Release(true)
}
