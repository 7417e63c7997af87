// Package proctest holds helpers for tests that start processes and check
// they are gone, down to the TestMain they share (Main). Only tests import it.
package proctest

import (
	"errors"
	"os"
	"strconv"
	"strings"
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

// UserProcs lists the processes, zombies aside, whose real or effective
// user is uid, read from /proc/<pid>/status.
func UserProcs(uid uint32) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var state string
		var ids []string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				state = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				ids = strings.Fields(v) // real, effective, saved, filesystem
			}
		}
		want := strconv.FormatUint(uint64(uid), 10)
		if !strings.HasPrefix(state, "Z") && len(ids) >= 2 && (ids[0] == want || ids[1] == want) {
			pids = append(pids, pid)
		}
	}
	return pids
}
