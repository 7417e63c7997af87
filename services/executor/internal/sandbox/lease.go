package sandbox

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrExhausted: every id of the range is taken.
var ErrExhausted = errors.New("every id of the range is taken")

// Range is the ids First to Last, both included.
type Range struct{ First, Last uint32 }

// ParseRange reads "first-last", two decimal ids, first ≤ last, neither 0.
// Errors: another shape.
func ParseRange(s string) (Range, error) {
	a, b, ok := strings.Cut(s, "-")
	first, errA := strconv.ParseUint(a, 10, 32)
	last, errB := strconv.ParseUint(b, 10, 32)
	if !ok || errA != nil || errB != nil || first == 0 || first > last {
		return Range{}, fmt.Errorf("id range %q: want first-last, two ids, 0 < first <= last", s)
	}
	return Range{First: uint32(first), Last: uint32(last)}, nil
}

// UnmarshalText parses "first-last" (ParseRange), for the environment.
func (r *Range) UnmarshalText(text []byte) error {
	v, err := ParseRange(string(text))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// String is "first-last".
func (r Range) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Size is how many ids the range holds.
func (r Range) Size() int { return int(r.Last-r.First) + 1 }

// Overlaps reports whether the two ranges share an id.
func (r Range) Overlaps(o Range) bool { return r.First <= o.Last && o.First <= r.Last }

// Leases hands each attempt a user id of its own from a range (its group
// id is the same number).
//
// What it guarantees: a uid is leased while its lock file, <dir>/uid-<n>,
// is locked with flock(2), which conflicts between any two open files, in
// one process or in several: two attempts of one executor, or of any
// executors that share dir on one host, never hold one uid at once. The
// executor holds the lock from Acquire to Release, which comes once the
// attempt's processes are gone (its PID namespace ended, its container
// removed); the attempt's shim holds it too (runner.Isolation.Hold) until
// it dies, with its namespace. A lock dies with the processes that hold
// it, so an executor killed with SIGKILL leaks no uid, and its attempts'
// namespaces die with it. One thing outlives an executor: a container,
// which its runtime runs. A lease of a container's attempt is marked
// (MarkContainer) until Release finds the container removed; a marked uid
// is leased again only once no process on the host runs as it.
type Leases struct {
	dir  string
	uids Range
}

// NewLeases returns the leases of uids under dir, which it makes (0700)
// when missing. Errors: dir cannot be made.
func NewLeases(dir string, uids Range) (*Leases, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lease directory: %w", err)
	}
	return &Leases{dir: dir, uids: uids}, nil
}

// Lease is one leased uid.
type Lease struct {
	UID  uint32
	file *os.File
}

// containerMark is a lease file's content while a container may run as its
// uid.
const containerMark = "container\n"

// Acquire leases a uid nobody holds, trying the range from a random id on,
// so that allocators seldom race for one. Errors: ErrExhausted; a lock file
// that cannot be opened.
func (l *Leases) Acquire() (*Lease, error) {
	n := l.uids.Size()
	start := rand.IntN(n)
	for i := range n {
		uid := l.uids.First + uint32((start+i)%n)
		f, ok, err := tryLock(filepath.Join(l.dir, "uid-"+strconv.FormatUint(uint64(uid), 10)))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if marked(f) && len(processesOf(uid)) > 0 {
			f.Close() // a container of an executor that died still runs as uid
			continue
		}
		return &Lease{UID: uid, file: f}, nil
	}
	return nil, fmt.Errorf("lease a uid from %s: %w", l.uids, ErrExhausted)
}

// File is the lease's locked file, for the attempt's shim to hold.
func (l *Lease) File() *os.File { return l.file }

// MarkContainer records that a container may run as the lease's uid, which
// its runtime, not the executor, runs: until Release(true), the uid is not
// leased again while a process runs as it.
func (l *Lease) MarkContainer() error {
	if _, err := l.file.WriteAt([]byte(containerMark), 0); err != nil {
		return fmt.Errorf("mark lease: %w", err)
	}
	return nil
}

// Release ends the lease. gone says that nothing runs as the uid any more
// (the attempt's container was removed): a mark is cleared; otherwise it
// stays.
func (l *Lease) Release(gone bool) {
	if gone {
		_ = l.file.Truncate(0)
	}
	_ = l.file.Close() // releases the lock, once the shim's copy is closed too
}

// tryLock opens path (made 0600 when missing) and takes its flock without
// waiting: ok false when another open file holds it.
func tryLock(path string) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("open lock: %w", err)
	}
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		return f, true, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		f.Close()
		return nil, false, nil
	default:
		f.Close()
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
}

// waitLock opens the lock file path and waits for its exclusive lock.
func waitLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// marked reports whether a lease file holds containerMark.
func marked(f *os.File) bool {
	b := make([]byte, len(containerMark))
	n, err := f.ReadAt(b, 0)
	return (err == nil || errors.Is(err, io.EOF)) && string(b[:n]) == containerMark
}

// processesOf lists the processes, zombies aside, whose real or effective
// user is uid, from /proc/<pid>/status.
func processesOf(uid uint32) []int {
	entries, _ := os.ReadDir("/proc")
	want := strconv.FormatUint(uint64(uid), 10)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok && strings.HasPrefix(strings.TrimSpace(v), "Z") {
				break
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if ids := strings.Fields(v); len(ids) >= 2 && (ids[0] == want || ids[1] == want) {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}
