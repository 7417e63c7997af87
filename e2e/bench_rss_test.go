package e2e

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PeakRSS returns the peak resident set size of each service process of
// the stack that is still alive, by process name (api, scheduler,
// abort-reconciler, executor-<i>), in MiB: VmHWM of /proc/<pid>/status,
// the high-water mark the kernel keeps over the process's life. A process
// that is gone (killed, or never started) is left out. Read it before the
// stack's teardown.
func (s *Stack) PeakRSS() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]float64{}
	for name, p := range s.procs {
		if !p.Alive() {
			continue
		}
		if kib, ok := vmHWM(p.Cmd.Process.Pid); ok {
			out[name] = round(float64(kib)/1024, 1)
		}
	}
	return out
}

// vmHWM reads VmHWM (peak RSS, KiB) from /proc/<pid>/status; ok is false
// when the process is gone or the line is missing.
func vmHWM(pid int) (kib int64, ok bool) { return procStatusKiB(pid, "VmHWM:") }

// vmRSS reads VmRSS (the resident set size now, KiB) as vmHWM reads VmHWM.
func vmRSS(pid int) (kib int64, ok bool) { return procStatusKiB(pid, "VmRSS:") }

// procStatusKiB reads the field (e.g. "VmHWM:", a size in kB) of
// /proc/<pid>/status; ok is false when the process is gone or the line is
// missing.
func procStatusKiB(pid int, field string) (kib int64, ok bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, found := strings.CutPrefix(sc.Text(), field)
		if !found {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// maxRSS merges peak RSS maps, keeping each process's largest value: a
// scenario of several stacks reports one figure per process name.
func maxRSS(maps ...map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = max(out[k], v)
		}
	}
	return out
}
