package runner

import (
	"fmt"
	"os"
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

// shimOpts is the shim's view of an Isolation: the flags it acts on itself.
type shimOpts struct {
	init, loopback, nnp bool
	nproc               int
	data                int64
	umask               int // -1: leave it
	hold                int // files from fd 4 on
	tmp                 string
}

// tmpOpt is the last of the shim's options when there is one: the rest of
// the argument, commas included, is the directory.
const tmpOpt = "tmp="

// encode is the shim's options argument: a comma list of init, lo, nnp,
// nproc=N, data=BYTES, umask=OCTAL, hold=N, then tmp=DIR.
func (iso *Isolation) encode() string {
	if iso == nil {
		return ""
	}
	var opts []string
	add := func(on bool, opt string) {
		if on {
			opts = append(opts, opt)
		}
	}
	add(iso.PIDNamespace, "init")
	add(iso.NoNetwork, "lo")
	add(iso.NoNewPrivs, "nnp")
	add(iso.MaxProcs > 0, "nproc="+strconv.Itoa(iso.MaxProcs))
	add(iso.MaxData > 0, "data="+strconv.FormatInt(iso.MaxData, 10))
	add(iso.Umask != nil, "umask="+strconv.FormatInt(int64(deref(iso.Umask)), 8))
	add(len(iso.Hold) > 0, "hold="+strconv.Itoa(len(iso.Hold)))
	add(iso.PrivateTmp != "", tmpOpt+iso.PrivateTmp)
	return strings.Join(opts, ",")
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// parseShimOpts reads encode's argument.
func parseShimOpts(s string) (shimOpts, error) {
	o := shimOpts{umask: -1}
	if i := strings.Index(","+s, ","+tmpOpt); i >= 0 {
		s, o.tmp = strings.TrimSuffix(s[:i], ","), s[i+len(tmpOpt):]
	}
	for _, opt := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) {
		k, v, _ := strings.Cut(opt, "=")
		var err error
		switch k {
		case "init":
			o.init = true
		case "lo":
			o.loopback = true
		case "nnp":
			o.nnp = true
		case "nproc":
			o.nproc, err = strconv.Atoi(v)
		case "data":
			o.data, err = strconv.ParseInt(v, 10, 64)
		case "umask":
			var u int64
			u, err = strconv.ParseInt(v, 8, 32)
			o.umask = int(u)
		case "hold":
			o.hold, err = strconv.Atoi(v)
		default:
			err = fmt.Errorf("unknown option %q", k)
		}
		if err != nil {
			return shimOpts{}, fmt.Errorf("bad shim option %q: %w", opt, err)
		}
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
	if o.tmp != "" {
		if err := privateTmp(o.tmp); err != nil {
			return err
		}
	}
	for fd := shimStatusFD + 1; fd <= shimStatusFD+o.hold; fd++ {
		syscall.CloseOnExec(fd)
	}
	if o.nnp {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	if o.umask >= 0 {
		syscall.Umask(o.umask)
	}
	if o.nproc > 0 {
		lim := &unix.Rlimit{Cur: uint64(o.nproc), Max: uint64(o.nproc)}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, lim); err != nil {
			return fmt.Errorf("RLIMIT_NPROC: %w", err)
		}
	}
	if o.loopback {
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
	if o.data <= 0 {
		return argv
	}
	script := fmt.Sprintf(`ulimit -d %d && exec "$@"`, max(o.data>>10, 1))
	return append([]string{Shell, "-c", script, "capstan-limit"}, argv...)
}

// tmpDirs are where a private temporary directory is mounted, those of
// them that exist.
var tmpDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// privateTmp makes every mount of the shim's mount namespace private (so
// nothing it mounts reaches the host's) and mounts dir on each of tmpDirs.
func privateTmp(dir string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mounts: %w", err)
	}
	// dir may be under a target: hold it open, so that each mount finds it.
	src, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("private tmp: %w", err)
	}
	defer unix.Close(src)
	srcPath := "/proc/self/fd/" + strconv.Itoa(src)
	for _, target := range tmpDirs {
		if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
			continue
		}
		if err := unix.Mount(srcPath, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount %s on %s: %w", dir, target, err)
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			return fmt.Errorf("remount %s: %w", target, err)
		}
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
