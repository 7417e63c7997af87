package runner

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// The shim is how nothing an attempt starts outlives the executor. A
// parent-death signal only reaches the process it is set on: with the shell
// started directly, a background grandchild (`sleep 600 &`) survived kill -9
// of the executor. So each attempt runs under a shim, this very binary
// re-executed with argv[0] shimArg0. It runs the attempt's process as its
// child and tells the runner on fd 3 that the process started and, at the
// end, its wait status. The shim keeps the executor's user, so that it can
// always end what the attempt started, and works in one of two ways:
//
//   - the init of the attempt's own PID namespace (Isolation.PIDNamespace):
//     it reaps every orphan of the namespace, passes SIGTERM, SIGINT and
//     SIGHUP on to all its processes, and exits when its child does; the
//     kernel then kills whatever is left. The executor's death SIGKILLs it
//     (PR_SET_PDEATHSIG), which ends the namespace the same way.
//   - without one, the leader of the attempt's process group: it gets
//     SIGTERM when the executor dies (catchable, unlike the SIGKILL a shell
//     would get) and then SIGKILLs its whole group. A process that leaves
//     the group (setsid) escapes it.
//
// Any binary that imports this package becomes the shim when started that
// way: init runs it and exits before main (or a test's TestMain) starts.
const shimArg0 = "capstan-attempt-shim"

// shimStatusFD is the shim's end of the status pipe; the files it holds
// (Isolation.Hold) follow it.
const shimStatusFD = 3

func init() {
	if len(os.Args) > 0 && os.Args[0] == shimArg0 {
		os.Exit(shimMain(os.Args[1:]))
	}
}

// shimArgs are the shim's arguments: the executor's pid, the user the
// attempt's process runs as (Credential.shimForm, or "" for the executor's
// own), the isolation options (Isolation.encode), then the argv of the
// attempt's process.
func shimArgs(runAs *Credential, iso *Isolation, argv []string) []string {
	user := ""
	if runAs != nil {
		user = runAs.shimForm()
	}
	return append([]string{shimArg0, strconv.Itoa(os.Getpid()), user, iso.encode()}, argv...)
}

// execFailed is the shim's status line prefix when the program itself could
// not be executed (not found, not executable, not a program): the runner
// turns it into an *ExecError.
const execFailed = "execfail "

// isExecFailure reports whether err, from starting a command, says the
// program cannot be executed rather than that the system failed otherwise.
func isExecFailure(err error) bool {
	return errors.Is(err, exec.ErrNotFound) || errors.Is(err, exec.ErrDot) || errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.EISDIR) ||
		errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EPERM)
}

// shimMain is the shim: args are shimArgs' (the executor's pid, the user to
// run as, the isolation options, the command line). Its exit code only
// matters when it fails; the runner takes the process's status from the
// status pipe.
func shimMain(args []string) int {
	// The child's parent-death signal fires when this thread exits: keep it.
	runtime.LockOSThread()
	status := os.NewFile(shimStatusFD, "status")
	syscall.CloseOnExec(shimStatusFD) // the child must not hold the pipe open
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGCHLD)
	parent, attr, opts, argv, err := parseShimArgs(args)
	if err == nil {
		err = opts.prepare()
	}
	if err != nil {
		fmt.Fprintf(status, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return 2
	}
	// Without a namespace of its own, the shim sees its parent: the
	// executor died before this shim could hear of it. (An init's parent
	// is outside its namespace: getppid answers 0; it learns of the death
	// from its parent-death SIGKILL, or from the status pipe.)
	if !opts.Init && os.Getppid() != parent {
		killGroup()
	}
	if _, err := exec.LookPath(argv[0]); err != nil { // before a limit's shell would hide it
		fmt.Fprintf(status, "%s%s\n", execFailed, strings.ReplaceAll(err.Error(), "\n", " "))
		return 127
	}
	argv = opts.limited(argv)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		prefix := "error "
		if isExecFailure(err) {
			prefix = execFailed
		}
		fmt.Fprintf(status, "%s%s\n", prefix, strings.ReplaceAll(err.Error(), "\n", " "))
		return 127
	}
	if _, err := fmt.Fprintln(status, "started"); err != nil && opts.Init {
		return 1 // the executor is gone: the namespace ends with this shim
	}
	if opts.Init {
		return initLoop(status, cmd.Process.Pid, sigs)
	}
	return leaderLoop(status, cmd, parent, sigs)
}

// leaderLoop is the process group leader's life: it waits for its child
// and writes its status; a signal from the executor's death ends the group.
func leaderLoop(status *os.File, cmd *exec.Cmd, parent int, sigs <-chan os.Signal) int {
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	for {
		select {
		case <-done:
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			fmt.Fprintf(status, "exit %d\n", uint32(ws))
			return 0
		case sig := <-sigs:
			// From the executor killing the group (the child got it too:
			// wait for it), or the executor's death: end the group.
			if sig != syscall.SIGCHLD && os.Getppid() != parent {
				killGroup()
			}
		}
	}
}

// initLoop is the namespace init's life: it reaps every process that ends
// in the namespace, passes a stop signal on to all of them, and returns
// once its child, pid, has ended, with its status written.
func initLoop(status *os.File, pid int, sigs <-chan os.Signal) int {
	for {
		if ws, ok := reapAll(pid); ok {
			fmt.Fprintf(status, "exit %d\n", uint32(ws))
			return 0
		}
		if sig := <-sigs; sig != syscall.SIGCHLD {
			_ = syscall.Kill(-1, sig.(syscall.Signal)) // every process of the namespace but this one
		}
	}
}

// reapAll reaps every child that has ended; ok once one of them was pid.
func reapAll(pid int) (ws syscall.WaitStatus, ok bool) {
	for {
		var st syscall.WaitStatus
		got, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if got <= 0 {
			return ws, ok
		}
		if got == pid {
			ws, ok = st, true
		}
	}
}

// parseShimArgs reads shimArgs: the executor's pid, the user to run as
// ("" or Credential.shimForm: the child's credential), the isolation
// options and the argv.
func parseShimArgs(args []string) (parent int, attr *syscall.SysProcAttr, opts shimOpts, argv []string, err error) {
	if len(args) < 4 {
		return 0, nil, opts, nil, fmt.Errorf("bad shim arguments %q", args)
	}
	if parent, err = strconv.Atoi(args[0]); err != nil {
		return 0, nil, opts, nil, fmt.Errorf("bad shim arguments %q", args)
	}
	attr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if args[1] != "" {
		runAs, err := parseShimForm(args[1])
		if err != nil {
			return 0, nil, opts, nil, err
		}
		attr.Credential = runAs.sys()
	}
	if opts, err = parseShimOpts(args[2]); err != nil {
		return 0, nil, opts, nil, err
	}
	return parent, attr, opts, args[3:], nil
}

// killGroup SIGKILLs the caller's process group, the caller included.
func killGroup() {
	_ = syscall.Kill(0, syscall.SIGKILL)
	select {} // SIGKILL is on its way
}

// readStarted reads the shim's first line: nil once the shell started, or
// why it could not.
func readStarted(r *bufio.Reader) error {
	line, err := r.ReadString('\n')
	switch {
	case line == "started\n":
		return nil
	case strings.HasPrefix(line, execFailed):
		return &ExecError{Msg: strings.TrimSpace(strings.TrimPrefix(line, execFailed))}
	case strings.HasPrefix(line, "error "):
		return errors.New(strings.TrimSpace(strings.TrimPrefix(line, "error ")))
	case err != nil && !errors.Is(err, io.EOF):
		return fmt.Errorf("read shim status: %w", err)
	}
	return fmt.Errorf("shim ended before starting the command: %q", line)
}

// readExit reads the shim's last line: the shell's wait status, or nil when
// the shim was killed first (its group was SIGKILLed).
func readExit(r *bufio.Reader) *syscall.WaitStatus {
	line, _ := r.ReadString('\n')
	raw, ok := strings.CutPrefix(strings.TrimSpace(line), "exit ")
	if !ok {
		return nil
	}
	v, err := strconv.ParseUint(raw, 10, 32)
	if err != nil {
		return nil
	}
	ws := syscall.WaitStatus(v)
	return &ws
}
