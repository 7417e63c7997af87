// Package runner starts and kills the operating-system processes of attempts:
// `/bin/sh -c <command>`, or an argv executed directly, under a shim that
// leads its own process group or, isolated (Isolation), is the init of its
// own PID namespace, with the last N bytes of stdout and stderr kept, killed
// as a whole (SIGTERM, a grace period, then SIGKILL), and tied to the
// executor's life by the shim, which ends them all when the executor dies
// (see shimArg0).
package runner

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Shell is the interpreter of every command.
const Shell = "/bin/sh"

// drainTimeout bounds how long output is read after the process group is
// gone: only a process that left the group (setsid) without a PID namespace
// can still hold the pipes.
const drainTimeout = time.Second

// stuckTimeout bounds how long Kill waits after SIGKILL before giving up (a
// process in uninterruptible sleep).
const stuckTimeout = 5 * time.Second

// ErrStuck is returned by Kill when the process did not exit after SIGKILL.
var ErrStuck = errors.New("process did not exit after SIGKILL")

// ExecError is Start's error when the program itself could not be executed:
// it does not exist (ENOENT, or not on $PATH), may not be executed (EACCES)
// or is no program (ENOEXEC). Msg is the exec error's text.
type ExecError struct{ Msg string }

func (e *ExecError) Error() string { return "exec: " + e.Msg }

// Spec is what Start runs.
type Spec struct {
	// Command is the script given to /bin/sh -c, when Args is empty.
	Command string
	// Args, when not empty, is the argv executed directly, without a shell:
	// Args[0] is a path, or a name looked up in Env's $PATH.
	Args []string
	// Dir is the working directory; it must exist.
	Dir string
	// Env is the complete environment, "KEY=value" each; later entries win.
	// Nil inherits the executor's environment.
	Env []string
	// LogLimit is how many bytes of stdout and of stderr to keep: the last
	// ones. 0 keeps nothing.
	LogLimit int
	// OnOutput, when set, is called with each piece of output as it is
	// read (stream "stdout" or "stderr"), on the goroutine that copies that
	// stream: it must not block, and p is valid only during the call.
	OnOutput func(stream string, p []byte)
	// RunAs, when set, is the user and group the process (not the shim)
	// runs as, with only its supplementary groups; the executor needs the
	// privilege to switch to it (root, or CAP_SETUID and CAP_SETGID). Nil:
	// the executor's own.
	RunAs *Credential
	// Isolation, when set, is how the process is separated from the rest
	// of the host (see Isolation); nil: a process group of its own only.
	Isolation *Isolation
}

// Result is how a process ended and what it wrote.
type Result struct {
	// ExitCode is the exit status, or 128+signal when a signal ended it.
	ExitCode int
	// Signal is the signal that ended the process, 0 when it exited.
	Signal syscall.Signal
	// Stdout and Stderr are the last LogLimit bytes of each stream.
	Stdout, Stderr []byte
	// Truncated is true when either stream produced more than LogLimit bytes.
	Truncated bool
}

// Process is a started command. Its process group is the command's pid.
type Process struct {
	pid    int
	init   bool          // the shim is its PID namespace's init: signal it, it passes them on
	exited chan struct{} // the group leader exited and its group was swept
	done   chan struct{} // result holds the outcome and the output

	mu     sync.Mutex
	reaped bool // once true the pid may be reused: never signal it again

	result Result
}

// Start runs spec.Args, or spec.Command with /bin/sh -c, under a shim (see
// shimArg0) that leads a new process group, or is the init of a new PID
// namespace (spec.Isolation), and ends everything the attempt started if
// the executor dies, however it dies: nothing an attempt started outlives
// the executor. The fork happens on an OS thread locked to a goroutine that
// lives until the process is reaped, because the parent-death signal fires
// when the forking thread, not the process, dies. When the shell exits,
// whatever is left of its process group (of its namespace, when it has
// one) is SIGKILLed: nothing an attempt started outlives it either.
// Errors: *ExecError when the program could not be executed; others when
// the shim could not start.
func Start(spec Spec) (*Process, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW, errR, errW)
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	cmd := exec.Command(selfExe)
	cmd.Args = shimArgs(spec.RunAs, spec.Isolation, spec.argv())
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = spec.Dir, spec.Env, outW, errW
	cmd.ExtraFiles = []*os.File{statW} // the shim's fd 3, then what it holds
	if spec.Isolation != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, spec.Isolation.Hold...)
	}
	cmd.SysProcAttr = spec.Isolation.sysProcAttr()

	p := &Process{exited: make(chan struct{}), done: make(chan struct{}),
		init: spec.Isolation != nil && spec.Isolation.PIDNamespace}
	out := &output{stdout: newTail(spec.LogLimit), stderr: newTail(spec.LogLimit), files: []*os.File{outR, errR}}
	out.stdout.on, out.stderr.on = hook(spec.OnOutput, "stdout"), hook(spec.OnOutput, "stderr")
	out.copying.Add(2)
	started := make(chan error, 1)
	go p.supervise(cmd, started, out, statR)
	if err := <-started; err != nil {
		closeAll(outR, errR)
		return nil, err
	}
	go out.copy(out.stdout, outR)
	go out.copy(out.stderr, errR)
	return p, nil
}

// argv is what the shim executes.
func (s Spec) argv() []string {
	if len(s.Args) > 0 {
		return s.Args
	}
	return []string{Shell, "-c", s.Command}
}

// selfExe is this very binary, which runs the shim.
const selfExe = "/proc/self/exe"

// supervise starts cmd (the shim) and waits for it on one locked OS thread,
// then sweeps the group, reaps the shim and collects the output and the
// shell's status.
func (p *Process) supervise(cmd *exec.Cmd, started chan<- error, out *output, stat *os.File) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread() // only once the process is reaped
	defer stat.Close()
	err := startOwned(cmd)
	closeAll(cmd.Stdout.(*os.File), cmd.Stderr.(*os.File), cmd.ExtraFiles[0]) // the child holds its own copies
	if err != nil {
		started <- fmt.Errorf("start %s: %w", Shell, err)
		return
	}
	defer disown(cmd.Process.Pid)
	p.pid = cmd.Process.Pid
	status := bufio.NewReader(stat)
	if err := readStarted(status); err != nil {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		_ = cmd.Wait()
		started <- fmt.Errorf("start: %w", err)
		return
	}
	started <- nil

	waitExit(p.pid) // leaves the leader a zombie, so its pgid cannot be reused yet
	p.mu.Lock()
	_ = syscall.Kill(-p.pid, syscall.SIGKILL) // sweep what the shell left behind
	p.reaped = true
	p.mu.Unlock()
	_ = cmd.Wait()
	close(p.exited)

	shell := readExit(status)
	p.result = out.collect()
	if shell == nil { // the shim died with its group before the shell's end
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		shell = &ws
	}
	p.result.ExitCode, p.result.Signal = exitStatus(*shell)
	close(p.done)
}

// waitExit blocks until pid has exited, without reaping it.
func waitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}

func exitStatus(ws syscall.WaitStatus) (int, syscall.Signal) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal()
	}
	return ws.ExitStatus(), 0
}

// Pid returns the shim's pid, which is also the attempt's process group id.
func (p *Process) Pid() int { return p.pid }

// Exited is closed once the shim (after its shell) has exited and its group
// was swept.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Wait blocks until the process has exited and its output is collected.
func (p *Process) Wait() Result {
	<-p.done
	return p.result
}

// Signal sends sig to the process group while its leader is not reaped; it
// is a no-op afterwards (the group is gone and its id may be reused). With
// a PID namespace, sig goes to the shim alone, which passes SIGTERM, SIGINT
// and SIGHUP on to every process of its namespace (setsid or not) and dies
// of SIGKILL, with all of them.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	target := -p.pid
	if p.init {
		target = p.pid
	}
	if err := syscall.Kill(target, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to %d: %w", sig, target, err)
	}
	return nil
}

// Kill sends SIGTERM to the process group (see Signal), waits up to grace
// for the shell to exit, then sends SIGKILL, and returns once the shell has
// exited (its group, or namespace, is then swept). Errors: ErrStuck when it is still there stuckTimeout after
// SIGKILL, or a signal that could not be sent.
func (p *Process) Kill(grace time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	t.Reset(stuckTimeout)
	select {
	case <-p.exited:
		return nil
	case <-t.C:
		return fmt.Errorf("pid %d: %w", p.pid, ErrStuck)
	}
}

// output collects the two streams of one process.
type output struct {
	stdout, stderr *tail
	files          []*os.File
	copying        sync.WaitGroup
}

func (o *output) copy(t *tail, r *os.File) {
	defer o.copying.Done()
	_, _ = io.Copy(t, r)
}

// collect waits for both streams to reach EOF, at most drainTimeout after the
// group is gone (only a process that left the group can still hold a pipe),
// then closes the pipes and returns the kept output.
func (o *output) collect() Result {
	eof := make(chan struct{})
	go func() {
		o.copying.Wait()
		close(eof)
	}()
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	select {
	case <-eof:
	case <-t.C:
	}
	closeAll(o.files...)
	<-eof
	return Result{Stdout: o.stdout.Bytes(), Stderr: o.stderr.Bytes(),
		Truncated: o.stdout.Truncated() || o.stderr.Truncated()}
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}
