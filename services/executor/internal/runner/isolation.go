package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Isolation is what separates an attempt's processes from the host's and
// from every other attempt's, beyond the user they run as (Spec.RunAs). The
// executor needs root (CAP_SYS_ADMIN for the namespaces, CAP_SYS_RESOURCE
// for the limits) to apply it.
type Isolation struct {
	// PIDNamespace makes the shim the init (pid 1) of a new PID namespace
	// (CLONE_NEWPID) that holds every process the attempt starts: when the
	// shim exits, or is SIGKILLed, the kernel kills all of them, setsid or
	// not, and the shim's end is reported only once they are all gone. The
	// shim gets SIGKILL when the executor dies (PR_SET_PDEATHSIG), and a
	// SIGTERM, SIGINT or SIGHUP it gets is passed on to every process of the
	// namespace (kill(-1)).
	PIDNamespace bool
	// PrivateTmp, when set, is a directory the attempt's user owns that
	// the shim mounts (a bind mount, nosuid, nodev) on /tmp, /var/tmp and
	// /dev/shm, in a mount namespace of its own (CLONE_NEWNS, with every
	// mount private to it): what the attempt leaves there goes with its
	// directory, and no later attempt that gets the same uid finds it. The
	// shim has an IPC namespace of its own (CLONE_NEWIPC) too.
	PrivateTmp string
	// KeepPaths are directories under /tmp, /var/tmp or /dev/shm that stay
	// where they are over PrivateTmp (mounted back on their paths): the
	// executor's data directory when it is there, so that the attempt's
	// directories keep their paths.
	KeepPaths []string
	// NoNetwork gives the shim a new network namespace (CLONE_NEWNET) with
	// only its loopback interface, brought up: nothing outside it is
	// reachable, not even the host's loopback services.
	NoNetwork bool
	// MaxProcs, when positive, is the process's RLIMIT_NPROC (soft and
	// hard): how many processes and threads its user may have at once. With
	// a user of its own per attempt, that bounds the attempt's. Root (the
	// shim) is exempt from it.
	MaxProcs int
	// MaxData, when positive, is the process's RLIMIT_DATA in bytes (soft
	// and hard, rounded down to KiB): its private writable memory (heap,
	// anonymous mappings), counted when mapped, not when touched. /bin/sh
	// sets it (`ulimit -d`) before it executes the process.
	MaxData int64
	// Umask, when set, is the process's umask.
	Umask *int
	// NoNewPrivs sets PR_SET_NO_NEW_PRIVS on the shim, and so on all it
	// starts: a setuid or file-capability program gains nothing.
	NoNewPrivs bool
	// Cgroup, when set, is an open cgroup v2 directory the shim starts in
	// (CLONE_INTO_CGROUP), so that the attempt's processes are in it from
	// their first instruction.
	Cgroup *os.File
	// Hold are files the shim keeps open as long as it lives (a lock the
	// attempt's user is leased under); the attempt's process never gets
	// them.
	Hold []*os.File
}

// shimOpts is the shim's view of an Isolation: what it does itself, as
// JSON in its options argument.
type shimOpts struct {
	Init     bool     `json:"init,omitempty"`
	Loopback bool     `json:"lo,omitempty"`
	NNP      bool     `json:"nnp,omitempty"`
	NProc    int      `json:"nproc,omitempty"`
	Data     int64    `json:"data,omitempty"`
	Umask    *int     `json:"umask,omitempty"`
	Hold     int      `json:"hold,omitempty"` // files from fd 4 on
	Tmp      string   `json:"tmp,omitempty"`
	Keep     []string `json:"keep,omitempty"`
}

// encode is the shim's options argument: shimOpts as JSON, "" for none.
func (iso *Isolation) encode() string {
	if iso == nil {
		return ""
	}
	b, err := json.Marshal(shimOpts{Init: iso.PIDNamespace, Loopback: iso.NoNetwork, NNP: iso.NoNewPrivs,
		NProc: iso.MaxProcs, Data: iso.MaxData, Umask: iso.Umask, Hold: len(iso.Hold), Tmp: iso.PrivateTmp,
		Keep: iso.KeepPaths})
	if err != nil {
		panic(err) // plain fields: it cannot fail
	}
	return string(b)
}

// parseShimOpts reads encode's argument.
func parseShimOpts(s string) (shimOpts, error) {
	var o shimOpts
	if s == "" {
		return o, nil
	}
	if err := json.Unmarshal([]byte(s), &o); err != nil {
		return shimOpts{}, fmt.Errorf("bad shim options %q: %w", s, err)
	}
	return o, nil
}

// sysProcAttr is how the runner forks the shim for iso: its own process
// group, a parent-death signal (SIGKILL for a namespace's init, which
// cannot be stopped otherwise from inside; SIGTERM for a group leader,
// which then kills its group), the namespaces and the cgroup.
func (iso *Isolation) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if iso == nil {
		return attr
	}
	if iso.PIDNamespace {
		attr.Cloneflags |= syscall.CLONE_NEWPID
		attr.Pdeathsig = syscall.SIGKILL
	}
	if iso.NoNetwork {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	if iso.PrivateTmp != "" {
		attr.Cloneflags |= syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC
	}
	if iso.Cgroup != nil {
		attr.UseCgroupFD, attr.CgroupFD = true, int(iso.Cgroup.Fd())
	}
	return attr
}

// prepare applies to the shim itself what its child inherits: no new
// privileges, the umask, the process limit (root, the shim, is exempt from
// it), the loopback interface up, the private temporary directories and
// the files it holds closed on exec.
func (o shimOpts) prepare() error {
	if o.Tmp != "" {
		if err := privateTmp(o.Tmp, o.Keep); err != nil {
			return err
		}
	}
	for fd := shimStatusFD + 1; fd <= shimStatusFD+o.Hold; fd++ {
		syscall.CloseOnExec(fd)
	}
	if o.NNP {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	if o.Umask != nil {
		syscall.Umask(*o.Umask)
	}
	if o.NProc > 0 {
		lim := &unix.Rlimit{Cur: uint64(o.NProc), Max: uint64(o.NProc)}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, lim); err != nil {
			return fmt.Errorf("RLIMIT_NPROC: %w", err)
		}
	}
	if o.Loopback {
		return loopbackUp()
	}
	return nil
}

// limited is argv run under o.data: the shell sets RLIMIT_DATA, soft and
// hard, in KiB, then executes argv. The limit must be set by the process
// itself: lowering the shim's own would bound the shim for good (raising a
// hard limit back, or lowering another user's, takes CAP_SYS_RESOURCE,
// which an executor may lack), and os/exec has no hook between fork and
// exec. Without a data limit argv is returned as it is.
func (o shimOpts) limited(argv []string) []string {
	if o.Data <= 0 {
		return argv
	}
	script := fmt.Sprintf(`ulimit -d %d && exec "$@"`, max(o.Data>>10, 1))
	return append([]string{Shell, "-c", script, "capstan-limit"}, argv...)
}

// tmpDirs are where a private temporary directory is mounted, those of
// them that exist.
var tmpDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// privateTmp makes every mount of the shim's mount namespace private (so
// nothing it mounts reaches the host's) and mounts dir on each of tmpDirs,
// then each of keep that was under one of them back on its path (below
// dir, on a directory made for it).
func privateTmp(dir string, keep []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mounts: %w", err)
	}
	// Each is held open, so that a mount on a directory above it leaves it
	// reachable.
	src, err := openPath(dir)
	if err != nil {
		return fmt.Errorf("private tmp: %w", err)
	}
	defer unix.Close(src)
	kept := map[string]int{}
	for _, k := range keep {
		fd, err := openPath(k)
		if err != nil {
			return fmt.Errorf("keep %s: %w", k, err)
		}
		defer unix.Close(fd)
		kept[k] = fd
	}
	for _, target := range tmpDirs {
		if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
			continue
		}
		if err := bindNoSuid(src, target); err != nil {
			return err
		}
		for k, fd := range kept {
			if rel, err := filepath.Rel(target, k); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
				if err := os.MkdirAll(k, 0o755); err != nil { // below dir, now on target
					return fmt.Errorf("keep %s: %w", k, err)
				}
				if err := bindNoSuid(fd, k); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func openPath(dir string) (int, error) {
	return unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// bindNoSuid bind-mounts the directory open as fd on target, nosuid and
// nodev.
func bindNoSuid(fd int, target string) error {
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount on %s: %w", target, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", target, err)
	}
	return nil
}

// loopbackUp brings the network namespace's loopback interface up.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}
