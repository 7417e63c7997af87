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
// re-executed with argv[0] shimArg0: the shim leads the attempt's process
// group, gets SIGTERM when the executor dies (PR_SET_PDEATHSIG, catchable,
// unlike the SIGKILL a shell would get) and then SIGKILLs its whole group.
// It runs the shell as its child, in the same group, and tells the runner on
// fd 3 that the shell started and, at the end, the shell's wait status.
//
// Any binary that imports this package becomes the shim when started that
// way: init runs it and exits before main (or a test's TestMain) starts.
const shimArg0 = "capstan-attempt-shim"

// shimStatusFD is the shim's end of the status pipe.
const shimStatusFD = 3

func init() {
	if len(os.Args) > 0 && os.Args[0] == shimArg0 {
		os.Exit(shimMain(os.Args[1:]))
	}
}

// shimArgs are the shim's arguments: the executor's pid, the user the
// attempt's process runs as ("uid:gid", or "" for the executor's own), then
// the argv of the attempt's process. The shim itself keeps the executor's
// user, so that it can always kill its group.
func shimArgs(runAs *Credential, argv []string) []string {
	user := ""
	if runAs != nil {
		user = runAs.String()
	}
	return append([]string{shimArg0, strconv.Itoa(os.Getpid()), user}, argv...)
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
// run as, the command line). Its exit code only matters when it fails; the runner takes the
// shell's status from the status pipe.
func shimMain(args []string) int {
	// The shell's parent-death signal fires when this thread exits: keep it.
	runtime.LockOSThread()
	status := os.NewFile(shimStatusFD, "status")
	syscall.CloseOnExec(shimStatusFD) // the shell must not hold the pipe open
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	parent, attr, argv, err := parseShimArgs(args)
	if err != nil {
		fmt.Fprintf(status, "error %s\n", err)
		return 2
	}
	orphaned := func() bool { return os.Getppid() != parent }
	if orphaned() { // the executor died before this shim could hear of it
		killGroup()
	}
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
	fmt.Fprintln(status, "started")
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
		case <-sigs:
			// From the executor killing the group (the shell got it too:
			// wait for it), or the executor's death: end the group.
			if orphaned() {
				killGroup()
			}
		}
	}
}

// parseShimArgs reads shimArgs: the executor's pid, the user to run as
// ("" or "uid:gid": the child's credential) and the argv.
func parseShimArgs(args []string) (parent int, attr *syscall.SysProcAttr, argv []string, err error) {
	if len(args) < 3 {
		return 0, nil, nil, fmt.Errorf("bad shim arguments %q", args)
	}
	if parent, err = strconv.Atoi(args[0]); err != nil {
		return 0, nil, nil, fmt.Errorf("bad shim arguments %q", args)
	}
	attr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if args[1] != "" {
		runAs, err := ParseCredential(args[1])
		if err != nil {
			return 0, nil, nil, err
		}
		attr.Credential = runAs.sys()
	}
	return parent, attr, args[2:], nil
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
