package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// RunDirMode is a run directory's mode: its group (the run's) reads,
// writes and enters it, and what is made in it takes its group (setgid).
const RunDirMode = os.ModeDir | os.ModeSetgid | 0o770

// RunGroups gives each run directory a group of its own from a range, so
// that the run's tasks, each its own user, share it (each attempt has the
// group as a supplementary one, and a umask of 007) while no other
// attempt can enter it.
//
// What it guarantees: a group n is claimed by the run directory that the
// claim file <dir>/gid-<n> names, for as long as that directory exists
// with group n (so removing a run directory frees its group, and a claim
// whose directory is gone is stale). A claim is made, and its directory
// given group n, under the claim file's flock, which conflicts across
// processes: two run directories made by executors that share dir on one
// host never get one group. Executors on several hosts that share a data
// volume but no dir may give two runs' directories one group: they must
// use disjoint ranges.
type RunGroups struct {
	dir  string
	gids Range
}

// NewRunGroups returns the run groups of gids, claimed under dir, which it
// makes (0700) when missing. Errors: dir cannot be made.
func NewRunGroups(dir string, gids Range) (*RunGroups, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("claim directory: %w", err)
	}
	return &RunGroups{dir: dir, gids: gids}, nil
}

// MakeRunDir returns the group of the run directory path, an absolute
// path, making the directory (owned by the executor, its group a newly
// claimed one, RunDirMode) and its parents (0711) when missing. A
// directory that exists with a group outside the range (made without the
// sandbox) is given one. Errors: ErrExhausted; the directory or a claim
// that cannot be made.
func (g *RunGroups) MakeRunDir(path string) (uint32, error) {
	if gid, ok := g.groupOf(path); ok {
		return gid, nil
	}
	if err := makeParents(path); err != nil {
		return 0, err
	}
	n := g.gids.Size()
	start := rand.IntN(n)
	var busy []uint32 // locked by a claim in progress, maybe of path itself
	for i := range n {
		gid := g.gids.First + uint32((start+i)%n)
		f, ok, err := tryLock(g.lockPath(gid))
		if err != nil {
			return 0, err
		}
		if !ok {
			busy = append(busy, gid)
			continue
		}
		if g.claimed(f, gid) {
			f.Close()
			continue
		}
		got, err := g.claim(f, path, gid)
		f.Close()
		return got, err
	}
	for _, gid := range busy {
		if got, ok := g.groupOf(path); ok {
			return got, nil
		}
		f, err := waitLock(g.lockPath(gid))
		if err != nil {
			return 0, err
		}
		if g.claimed(f, gid) {
			f.Close()
			continue
		}
		got, err := g.claim(f, path, gid)
		f.Close()
		return got, err
	}
	if got, ok := g.groupOf(path); ok {
		return got, nil
	}
	return 0, fmt.Errorf("claim a run group from %s: %w", g.gids, ErrExhausted)
}

// lockPath is the claim file of gid.
func (g *RunGroups) lockPath(gid uint32) string {
	return filepath.Join(g.dir, "gid-"+strconv.FormatUint(uint64(gid), 10))
}

// makeParents makes the run directory's parents, <project>/<domain>, 0711:
// an attempt may pass through them but not list them.
func makeParents(path string) error {
	parent := filepath.Dir(path)
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	for _, dir := range []string{parent, filepath.Dir(parent)} {
		if err := os.Chmod(dir, 0o711); err != nil {
			return fmt.Errorf("create directory: %w", err)
		}
	}
	return nil
}

// groupOf returns the group of the directory path when it is one of the
// range's.
func (g *RunGroups) groupOf(path string) (uint32, bool) {
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() {
		return 0, false
	}
	gid := fi.Sys().(*syscall.Stat_t).Gid
	return gid, gid >= g.gids.First && gid <= g.gids.Last
}

// claimed reports whether the locked claim file f of gid names a directory
// that has group gid.
func (g *RunGroups) claimed(f *os.File, gid uint32) bool {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 4096))
	if err != nil || len(b) == 0 {
		return false
	}
	got, ok := g.groupOf(string(b))
	return ok && got == gid
}

// claim records, in the locked claim file f, that path has group gid, and
// makes it so: a new directory made aside and renamed into place without
// replacing one (renameat2 RENAME_NOREPLACE), or the existing directory
// given the group. It returns the directory's group, another executor's
// when it made the directory first.
func (g *RunGroups) claim(f *os.File, path string, gid uint32) (uint32, error) {
	if err := f.Truncate(0); err != nil {
		return 0, fmt.Errorf("claim run group: %w", err)
	}
	if _, err := f.WriteAt([]byte(path), 0); err != nil {
		return 0, fmt.Errorf("claim run group: %w", err)
	}
	err := placeRunDir(path, gid)
	if errors.Is(err, fs.ErrExist) {
		if got, ok := g.groupOf(path); ok {
			return got, nil // just made by another executor, with its group
		}
		err = setRunGroup(path, gid) // made without the sandbox
	}
	if err != nil {
		return 0, err
	}
	got, ok := g.groupOf(path)
	if !ok {
		return 0, fmt.Errorf("run directory %s has no run group", path)
	}
	return got, nil
}

// placeRunDir makes path, a run directory with group gid, atomically.
// Errors: fs.ErrExist when path exists.
func placeRunDir(path string, gid uint32) error {
	tmp := fmt.Sprintf("%s.new-%d", path, rand.Int64())
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	if err := setRunGroup(tmp, gid); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) { // a file system without it
		if err = os.Mkdir(path, 0o700); err == nil {
			err = setRunGroup(path, gid)
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	if errors.Is(err, unix.EEXIST) || errors.Is(err, fs.ErrExist) {
		return fs.ErrExist
	}
	if err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	return nil
}

// setRunGroup gives the directory path group gid and RunDirMode.
func setRunGroup(path string, gid uint32) error {
	if err := os.Lchown(path, -1, int(gid)); err != nil {
		return fmt.Errorf("give the run directory its group: %w", err)
	}
	if err := os.Chmod(path, RunDirMode); err != nil {
		return fmt.Errorf("give the run directory its group: %w", err)
	}
	return nil
}
