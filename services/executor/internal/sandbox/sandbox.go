// Package sandbox separates the attempts one host runs from each other and
// from the host: each gets a user and group of its own (Leases), shares
// its run's directory through a group of the run's (RunGroups), runs in
// PID, mount and IPC namespaces of its own (and a network namespace with
// only loopback when its step says network: none), under process and
// memory limits, in a cgroup v2 of its own where the host delegates one
// (Cgroups). The executor needs root for it.
package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
)

// Defaults of Config.
var (
	// DefaultUIDs are the attempts' users: 65,536 ids above those of a
	// host's accounts (which stop below 65,534 on common distributions)
	// and outside the ranges /etc/subuid hands out from 100,000 on many
	// (pick another range where the host's subuid ranges take this one).
	DefaultUIDs = Range{First: 100000, Last: 165535}
	// DefaultRunGIDs are the run directories' groups: the 65,536 ids after
	// DefaultUIDs, so that no attempt's own group is a run's.
	DefaultRunGIDs = Range{First: 165536, Last: 231071}
)

// DefaultLockDir holds the uid leases and run group claims of every
// executor of a host.
const DefaultLockDir = "/run/capstan"

// DefaultMaxProcs bounds an attempt's processes and threads.
const DefaultMaxProcs = 4096

// Mechanism names, joined with "+" in Name: what every attempt of the
// executor gets.
const (
	// MechUID: a user and group of its own, work directory 0700 owned by it.
	MechUID = "uid"
	// MechPIDNS: a PID namespace (and mount and IPC ones) whose end ends
	// every process it started; private /tmp.
	MechPIDNS = "pidns"
	// MechNetNS: network: none steps get a network namespace with only
	// loopback.
	MechNetNS = "netns"
	// MechRlimit: RLIMIT_NPROC, and RLIMIT_DATA from resources.memory_bytes
	// when no memory cgroup bounds it.
	MechRlimit = "rlimit"
	// MechCgroup: a cgroup v2 with memory.max, cpu.max and pids.max from
	// the step's resources (those of the controllers the host delegates).
	MechCgroup = "cgroup"
	// None is an executor without a sandbox (CAPSTAN_EXECUTOR_INSECURE).
	None = "none"
)

// Config configures a Sandbox.
type Config struct {
	// UIDs are the attempts' users (each attempt's group is its uid).
	// Default DefaultUIDs.
	UIDs Range
	// RunGIDs are the run directories' groups; they must not overlap UIDs.
	// Default DefaultRunGIDs.
	RunGIDs Range
	// LockDir holds the leases and claims; every executor of a host that
	// uses the same ranges must share it. Default DefaultLockDir.
	LockDir string
	// MaxProcs bounds each attempt's processes and threads (RLIMIT_NPROC,
	// pids.max, a container's --pids-limit). Default DefaultMaxProcs.
	MaxProcs int
	// Cgroups makes the attempts' cgroups; nil: none (see DetectCgroups).
	Cgroups *Cgroups
}

// Sandbox hands attempts what separates them. It is safe for concurrent
// use.
type Sandbox struct {
	cfg    Config
	leases *Leases
	groups *RunGroups
}

// New returns a Sandbox. Errors: overlapping ranges; a lock directory that
// cannot be made.
func New(cfg Config) (*Sandbox, error) {
	if cfg.UIDs == (Range{}) {
		cfg.UIDs = DefaultUIDs
	}
	if cfg.RunGIDs == (Range{}) {
		cfg.RunGIDs = DefaultRunGIDs
	}
	cfg.LockDir = cmp.Or(cfg.LockDir, DefaultLockDir)
	cfg.MaxProcs = cmp.Or(cfg.MaxProcs, DefaultMaxProcs)
	if cfg.UIDs.Overlaps(cfg.RunGIDs) {
		return nil, fmt.Errorf("the uid range %s overlaps the run gid range %s", cfg.UIDs, cfg.RunGIDs)
	}
	leases, err := NewLeases(filepath.Join(cfg.LockDir, "uids"), cfg.UIDs)
	if err != nil {
		return nil, err
	}
	groups, err := NewRunGroups(filepath.Join(cfg.LockDir, "gids"), cfg.RunGIDs)
	if err != nil {
		return nil, err
	}
	return &Sandbox{cfg: cfg, leases: leases, groups: groups}, nil
}

// Name is what the worker reports as its sandbox: the mechanisms joined
// with "+", e.g. "uid+pidns+netns+rlimit", with "+cgroup" where cgroups
// are delegated.
func (s *Sandbox) Name() string {
	mechs := []string{MechUID, MechPIDNS, MechNetNS, MechRlimit}
	if s.cfg.Cgroups != nil {
		mechs = append(mechs, MechCgroup)
	}
	return strings.Join(mechs, "+")
}

// MaxProcs is Config.MaxProcs.
func (s *Sandbox) MaxProcs() int { return s.cfg.MaxProcs }

// RunDir makes the run directory path (absolute) when missing and returns
// its group (see RunGroups.MakeRunDir).
func (s *Sandbox) RunDir(path string) (uint32, error) { return s.groups.MakeRunDir(path) }

// Attempt is one attempt's share of the sandbox: its user, its run's
// group, its cgroup.
type Attempt struct {
	lease  *Lease
	runGID uint32
	cgroup *Cgroup
	procs  int
	data   int64
}

// Enter leases attempt id a user and makes its cgroup with res's limits.
// runGID is its run directory's group (RunDir). Errors: ErrExhausted; a
// lease or cgroup that cannot be made.
func (s *Sandbox) Enter(id int64, runGID uint32, res domain.Resources) (*Attempt, error) {
	lease, err := s.leases.Acquire()
	if err != nil {
		return nil, err
	}
	a := &Attempt{lease: lease, runGID: runGID, procs: s.cfg.MaxProcs}
	if c := s.cfg.Cgroups; c != nil {
		if a.cgroup, err = c.Make(id, res, s.cfg.MaxProcs); err != nil {
			lease.Release(true)
			return nil, err
		}
	}
	if a.cgroup == nil || !slices.Contains(s.cfg.Cgroups.Controllers(), "memory") {
		a.data = res.MemoryBytes
	}
	return a, nil
}

// UID is the attempt's user (and group).
func (a *Attempt) UID() uint32 { return a.lease.UID }

// Credential is who the attempt's processes run as: its user and group,
// with its run's group.
func (a *Attempt) Credential() *runner.Credential {
	return &runner.Credential{UID: a.lease.UID, GID: a.lease.UID, Groups: []uint32{a.runGID}}
}

// RunGID is the attempt's run's group.
func (a *Attempt) RunGID() uint32 { return a.runGID }

// umask lets the run's group read and write what the attempt makes in the
// run's directory, and nobody else.
var umask = 0o007

// Isolation is how a host process of the attempt (the shell plugin's) is
// isolated: its PID, mount and IPC namespaces with tmp (a directory the
// attempt's user owns) as its /tmp, /var/tmp and /dev/shm (keep, the data
// directory, stays on its path there), a network namespace of its own
// when noNetwork, no new privileges, umask 007, its limits, its cgroup,
// and the shim holding its lease.
func (a *Attempt) Isolation(noNetwork bool, tmp string, keep ...string) *runner.Isolation {
	iso := a.CLIIsolation()
	iso.NoNetwork, iso.PrivateTmp, iso.KeepPaths, iso.Umask = noNetwork, tmp, keep, &umask
	iso.MaxProcs, iso.MaxData = a.procs, a.data
	return iso
}

// CLIIsolation is how a process the executor trusts runs for the attempt
// (a container runtime's CLI, as the executor's user): in a PID namespace
// and the attempt's cgroup, the shim holding its lease, with no new
// privileges; the container's own limits are the runtime's flags.
func (a *Attempt) CLIIsolation() *runner.Isolation {
	iso := &runner.Isolation{PIDNamespace: true, NoNewPrivs: true, Hold: []*os.File{a.lease.File()}}
	if a.cgroup != nil {
		iso.Cgroup = a.cgroup.File()
	}
	return iso
}

// MarkContainer records that a container runs as the attempt's user (see
// Lease.MarkContainer).
func (a *Attempt) MarkContainer() error { return a.lease.MarkContainer() }

// Close gives the attempt's user and cgroup back once its processes are
// gone; gone says that its container, if it had one, was removed too.
// Errors: its cgroup could not be removed (the lease is given back all
// the same).
func (a *Attempt) Close(gone bool) error {
	var err error
	if a.cgroup != nil {
		err = a.cgroup.Remove()
	}
	a.lease.Release(gone)
	return err
}

// Probe runs `/bin/sh -c 'exit 0'` in dir as a leased user, with every
// isolation an attempt may get: the check that the executor may sandbox
// attempts at all. Errors: why it may not (no root, no namespaces, ...).
func (s *Sandbox) Probe(dir string) error {
	a, err := s.Enter(0, s.cfg.RunGIDs.First, domain.Resources{})
	if err != nil {
		return err
	}
	defer a.Close(true)
	tmp, err := os.MkdirTemp(dir, ".sandbox-probe-")
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chown(tmp, int(a.UID()), int(a.UID())); err != nil {
		return fmt.Errorf("probe: give the attempt's user a directory: %w", err)
	}
	p, err := runner.Start(runner.Spec{Command: "exit 0", Dir: tmp, Env: []string{"PATH=/usr/bin:/bin"},
		RunAs: a.Credential(), Isolation: a.Isolation(true, tmp, dir)})
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if res := p.Wait(); res.ExitCode != 0 {
		return fmt.Errorf("probe: %w", errors.New(strings.TrimSpace(string(res.Stderr))))
	}
	return nil
}
