package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
)

// maxExecOutput bounds what Exec keeps of a command's combined output.
const maxExecOutput = 16 << 10

// Exec runs argv to its end, or until ctx ends (then it is SIGKILLed), with
// env (nil: the executor's own), and returns its exit code and combined
// output (the first 16 KiB). It is for short helper commands such as
// `docker stop`: the orphan reaper (ReapOrphans) leaves the child alone, so
// its status is not stolen. Errors: the command could not start (an
// *ExecError when the program could not be executed), or ctx's error.
func Exec(ctx context.Context, env []string, argv ...string) (code int, out string, err error) {
	if len(argv) == 0 {
		return -1, "", errors.New("exec: empty argv")
	}
	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out1 := &limited{&buf} // one writer for both: os/exec then shares one pipe
	cmd.Env, cmd.Stdout, cmd.Stderr = env, out1, out1
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startOwned(cmd); err != nil {
		if isExecFailure(err) {
			return -1, "", &ExecError{Msg: err.Error()}
		}
		return -1, "", fmt.Errorf("start %s: %w", argv[0], err)
	}
	defer disown(cmd.Process.Pid)
	err = cmd.Wait()
	out = strings.TrimSpace(buf.String())
	if ctx.Err() != nil {
		return -1, out, ctx.Err()
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), out, nil
	}
	if err != nil {
		return -1, out, fmt.Errorf("wait for %s: %w", argv[0], err)
	}
	return 0, out, nil
}

// limited keeps the first maxExecOutput bytes written to it.
type limited struct{ b *bytes.Buffer }

func (l *limited) Write(p []byte) (int, error) {
	if room := maxExecOutput - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
