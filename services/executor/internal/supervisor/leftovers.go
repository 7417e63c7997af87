package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/capstan-run/capstan/pkg/domain"
)

// The directories attempts leave in the data directory: run directories,
// which outlive their attempts until their run is deleted, and work
// directories, which an executor killed before its attempt ended leaves.
// The supervisor lists them and removes those the caller names, but for
// those of the attempts it holds: a directory is removed only while no
// held attempt uses it, and an attempt that starts meanwhile prepares its
// directories once the removal is done (awaitRemoval).

// RunDirs lists the run directories of the data directory,
// runs/<project>/<domain>/<run>, by run key, in key order. A directory
// whose names are not run names (domain.ValidName) is not one. Errors: a
// directory that cannot be read (none yet is no error).
func (s *Supervisor) RunDirs() ([]domain.RunKey, error) {
	var keys []domain.RunKey
	root := filepath.Join(s.cfg.DataDir, "runs")
	projects, err := subdirs(root)
	for _, p := range projects {
		domains, derr := subdirs(filepath.Join(root, p))
		err = errors.Join(err, derr)
		for _, d := range domains {
			runs, rerr := subdirs(filepath.Join(root, p, d))
			err = errors.Join(err, rerr)
			for _, r := range runs {
				keys = append(keys, domain.RunKey{Project: p, Domain: d, Run: r})
			}
		}
	}
	return keys, err
}

// WorkDirs lists the attempts whose work directories, attempts/<id>, the
// data directory holds, by id, ascending. Errors: as RunDirs'.
func (s *Supervisor) WorkDirs() ([]int64, error) {
	entries, err := os.ReadDir(filepath.Join(s.cfg.DataDir, "attempts"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list work directories: %w", err)
	}
	var ids []int64
	for _, e := range entries {
		if id, err := strconv.ParseInt(e.Name(), 10, 64); err == nil && id > 0 && e.IsDir() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// RemoveRunDirs removes the run directories of keys, but for those of the
// runs of attempts it holds, and returns the keys whose directory it
// removed (or that had none). A key that is not a run's is skipped; a
// failure is logged.
func (s *Supervisor) RemoveRunDirs(keys []domain.RunKey) []domain.RunKey {
	var picked []domain.RunKey
	paths := s.removeUnused(func() []string {
		used := map[domain.RunKey]bool{}
		for _, a := range s.held {
			used[domain.RunKey{Project: a.spec.Project, Domain: a.spec.Domain, Run: a.spec.Run}] = true
		}
		var paths []string
		for _, k := range keys {
			if !used[k] && domain.ValidName(k.Project) && domain.ValidName(k.Domain) && domain.ValidName(k.Run) {
				picked = append(picked, k)
				paths = append(paths, s.runDir(k))
			}
		}
		return paths
	})
	return slices.DeleteFunc(picked, func(k domain.RunKey) bool { return !slices.Contains(paths, s.runDir(k)) })
}

// RemoveWorkDirs removes the work directories of the attempts ids, but
// for those of the attempts it holds, and returns the ids whose directory
// it removed (or that had none). A failure is logged.
func (s *Supervisor) RemoveWorkDirs(ids []int64) []int64 {
	var picked []int64
	paths := s.removeUnused(func() []string {
		var paths []string
		for _, id := range ids {
			if s.held[id] == nil && id > 0 {
				picked = append(picked, id)
				paths = append(paths, s.workDir(id))
			}
		}
		return paths
	})
	return slices.DeleteFunc(picked, func(id int64) bool { return !slices.Contains(paths, s.workDir(id)) })
}

// runDir and workDir are the run directory of key and the work directory
// of attempt id (see dirs).
func (s *Supervisor) runDir(key domain.RunKey) string {
	return filepath.Join(s.cfg.DataDir, "runs", key.Project, key.Domain, key.Run)
}

func (s *Supervisor) workDir(id int64) string {
	return filepath.Join(s.cfg.DataDir, "attempts", strconv.FormatInt(id, 10))
}

// removeUnused removes the directories pick names and returns those it
// removed. pick runs with s.mu held, so it reads s.held as no attempt can
// start; the paths it names are marked removing (a path another removal
// holds is left to it) until their removal is done, which an attempt that
// starts meanwhile waits for before it prepares its directories.
func (s *Supervisor) removeUnused(pick func() []string) []string {
	done := make(chan struct{})
	s.mu.Lock()
	paths := slices.DeleteFunc(pick(), func(p string) bool { return s.removing[p] != nil })
	for _, p := range paths {
		s.removing[p] = done
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for _, p := range paths {
			delete(s.removing, p)
		}
		s.mu.Unlock()
		close(done)
	}()
	removed := make([]string, 0, len(paths))
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			s.log.Warn("remove leftover directory failed", "dir", p, "err", err)
			continue
		}
		removed = append(removed, p)
	}
	return removed
}

// awaitRemoval returns once no removal (removeUnused) holds any of paths.
// The caller's attempt is held, so no new removal takes them meanwhile.
func (s *Supervisor) awaitRemoval(paths ...string) {
	for {
		s.mu.Lock()
		var busy chan struct{}
		for _, p := range paths {
			if c := s.removing[p]; c != nil {
				busy = c
				break
			}
		}
		s.mu.Unlock()
		if busy == nil {
			return
		}
		<-busy
	}
}

// subdirs lists the names of the directories in dir that are valid names
// (domain.ValidName). A dir that does not exist has none.
func subdirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && domain.ValidName(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
