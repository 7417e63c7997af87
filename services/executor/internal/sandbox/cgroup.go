package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"golang.org/x/sys/unix"
)

// cgroupControllers are the cgroup v2 controllers an attempt's limits use.
var cgroupControllers = []string{"cpu", "memory", "pids"}

// cpuPeriod is cpu.max's period in microseconds (the kernel's default).
const cpuPeriod = 100000

// Cgroups makes a cgroup v2 per attempt, with the step's limits, under the
// executor's own cgroup, when the host delegates one to it: the executor
// moves itself into <own>/capstan-executor (cgroup v2 lets a cgroup with
// controllers for its children hold no process) and makes
// <own>/attempt-<id> for each attempt.
type Cgroups struct {
	base        string
	controllers []string
}

// DetectCgroups returns the attempts' cgroups under the executor's own
// cgroup, or nil and why there are none: root (/sys/fs/cgroup) is not a
// cgroup v2 (unified) hierarchy, none of cpu, memory and pids is
// delegated to the executor's cgroup (its cgroup.controllers), the
// executor shares its cgroup with other processes, or it may not write
// there. self is /proc/self/cgroup's content.
func DetectCgroups(root string, self []byte) (*Cgroups, string) {
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, root + " is not a cgroup v2 hierarchy"
	}
	var own string
	for _, line := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = filepath.Join(root, p)
		}
	}
	if own == "" {
		return nil, "the executor is in no cgroup v2"
	}
	return delegate(own, os.Getpid())
}

// delegate takes the cgroup own for attempts: the executor, pid, alone in
// it, moves to own/capstan-executor, and the controllers own offers are
// enabled for its children.
func delegate(own string, pid int) (*Cgroups, string) {
	offered, err := os.ReadFile(filepath.Join(own, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Sprintf("read %s: %v", own, err)
	}
	var use []string
	for _, c := range strings.Fields(string(offered)) {
		if slices.Contains(cgroupControllers, c) {
			use = append(use, c)
		}
	}
	if len(use) == 0 {
		return nil, "no cpu, memory or pids controller is delegated to " + own
	}
	procs, err := os.ReadFile(filepath.Join(own, "cgroup.procs"))
	if err != nil || strings.Join(strings.Fields(string(procs)), " ") != strconv.Itoa(pid) {
		return nil, "the executor shares its cgroup " + own + " with other processes"
	}
	leaf := filepath.Join(own, "capstan-executor")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Sprintf("make %s: %v", leaf, err)
	}
	if err := writeFile(leaf, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return nil, err.Error()
	}
	enable := "+" + strings.Join(use, " +")
	if err := writeFile(own, "cgroup.subtree_control", enable); err != nil {
		return nil, err.Error()
	}
	return &Cgroups{base: own, controllers: use}, ""
}

// Controllers are the controllers an attempt's cgroup has.
func (c *Cgroups) Controllers() []string { return c.controllers }

// Cgroup is one attempt's cgroup.
type Cgroup struct {
	path string
	dir  *os.File
}

// Make makes attempt id's cgroup with its limits: memory.max (and no
// swap) from res.MemoryBytes, cpu.max from res.CPUMillis (that share of
// each 100 ms period), pids.max from pids; zero is no limit. A leftover of
// the same attempt is removed first. Errors: the cgroup cannot be made.
func (c *Cgroups) Make(id int64, res domain.Resources, pids int) (*Cgroup, error) {
	path := filepath.Join(c.base, "attempt-"+strconv.FormatInt(id, 10))
	if err := os.Mkdir(path, 0o755); errors.Is(err, os.ErrExist) {
		_ = (&Cgroup{path: path}).remove()
		err = os.Mkdir(path, 0o755)
		if err != nil {
			return nil, fmt.Errorf("make cgroup: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("make cgroup: %w", err)
	}
	g := &Cgroup{path: path}
	if err := c.limit(g, res, pids); err != nil {
		_ = g.remove()
		return nil, err
	}
	dir, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = g.remove()
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	g.dir = dir
	return g, nil
}

// limit writes g's limits for the controllers c has.
func (c *Cgroups) limit(g *Cgroup, res domain.Resources, pids int) error {
	has := func(ctl string) bool { return slices.Contains(c.controllers, ctl) }
	if has("memory") && res.MemoryBytes > 0 {
		if err := writeFile(g.path, "memory.max", strconv.FormatInt(res.MemoryBytes, 10)); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(g.path, "memory.swap.max")); err == nil {
			if err := writeFile(g.path, "memory.swap.max", "0"); err != nil {
				return err
			}
		}
	}
	if has("cpu") && res.CPUMillis > 0 {
		quota := max(res.CPUMillis*cpuPeriod/1000, 1000) // the kernel's least quota is 1 ms
		if err := writeFile(g.path, "cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriod)); err != nil {
			return err
		}
	}
	if has("pids") && pids > 0 {
		if err := writeFile(g.path, "pids.max", strconv.Itoa(pids)); err != nil {
			return err
		}
	}
	return nil
}

// File is the cgroup's directory, for the shim to start in.
func (g *Cgroup) File() *os.File { return g.dir }

// Path is the cgroup's directory.
func (g *Cgroup) Path() string { return g.path }

// Remove removes the cgroup once the attempt's processes are gone,
// killing any left (cgroup.kill) first. Errors: it could not be removed.
func (g *Cgroup) Remove() error {
	if g.dir != nil {
		g.dir.Close()
	}
	return g.remove()
}

// removeTries bound the tries of an rmdir that finds the cgroup busy: its
// killed processes may take a moment to be gone.
const (
	removeTries = 50
	removeDelay = 10 * time.Millisecond
)

func (g *Cgroup) remove() error {
	var err error
	for range removeTries {
		if err = unix.Rmdir(g.path); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		_ = writeFile(g.path, "cgroup.kill", "1")
		time.Sleep(removeDelay) // the killed processes exit asynchronously
	}
	return fmt.Errorf("remove cgroup %s: %w", g.path, err)
}

func writeFile(dir, name, value string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}
