package runner

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reapTick is how often ReapOrphans scans even without SIGCHLD (signals
// coalesce).
const reapTick = 5 * time.Second

// The processes Start forked and will wait for itself. forkMu is held for
// reading around each fork and for writing by a reaping scan, so a scan never
// sees a child that is not yet recorded.
var (
	forkMu  sync.RWMutex
	ownedMu sync.Mutex
	owned   = map[int]bool{}
)

func startOwned(cmd *exec.Cmd) error {
	forkMu.RLock()
	defer forkMu.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	ownedMu.Lock()
	owned[cmd.Process.Pid] = true
	ownedMu.Unlock()
	return nil
}

func disown(pid int) {
	ownedMu.Lock()
	delete(owned, pid)
	ownedMu.Unlock()
}

// ReapOrphans makes this process the reaper of its orphaned descendants
// (PR_SET_CHILD_SUBREAPER) and reaps those that exit, until ctx ends. Killing
// a process group orphans the grandchildren that outlive their shell for a
// moment; in a container the executor is PID 1 and nothing else would reap
// them, so they would stay zombies. Processes Start is waiting for are left
// alone, but any other zombie child is reaped: a program that runs
// ReapOrphans must start its children only with Start. Errors: the
// subreaper flag could not be set.
func ReapOrphans(ctx context.Context, log *slog.Logger) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set child subreaper: %w", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	t := time.NewTicker(reapTick)
	defer t.Stop()
	for {
		if n := reapOnce(); n > 0 {
			log.Debug("reaped orphans", "count", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sigs:
		case <-t.C:
		}
	}
}

// reapOnce reaps every zombie child of this process that Start does not own
// and returns how many it reaped.
func reapOnce() int {
	forkMu.Lock()
	defer forkMu.Unlock()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self, n := os.Getpid(), 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !zombieChildOf(pid, self) {
			continue
		}
		ownedMu.Lock()
		mine := owned[pid]
		ownedMu.Unlock()
		var ws syscall.WaitStatus
		if !mine {
			if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
				n++
			}
		}
	}
	return n
}

// zombieChildOf reports whether /proc/<pid>/stat says pid is a zombie whose
// parent is ppid. The fields after the command name, which may hold spaces
// and parentheses, are: state, ppid, ...
func zombieChildOf(pid, ppid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := bytes.Fields(b[i+1:])
	return len(f) >= 2 && string(f[0]) == "Z" && string(f[1]) == strconv.Itoa(ppid)
}
