// Package proctest holds helpers for tests that start processes and check
// they are gone, down to the TestMain they share (Main). Only tests import it.
package proctest

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// BecomeSubreaper makes the calling process the reaper of its orphaned
// descendants (PR_SET_CHILD_SUBREAPER), so that Gone can reap a killed
// grandchild even where PID 1 never reaps zombies (some containers and VMs).
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// Gone reports whether pid no longer exists: kill(pid, 0) answers ESRCH. A
// zombie that is this process's child (an orphan handed over by
// BecomeSubreaper) is reaped first; only that pid is waited for, so the
// statuses os/exec waits for are never stolen as long as pid is not a child
// that os/exec has yet to reap.
func Gone(pid int) bool {
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
