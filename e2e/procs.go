package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ProcessGone reports whether pid no longer runs (absent or a zombie).
func ProcessGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// startAPIOnAnyPort starts api process name on a loopback port the kernel
// picks and returns the address it listens on.
func (s *Stack) startAPIOnAnyPort(name string) string {
	s.t.Helper()
	s.StartService(name, "CAPSTAN_API_ADDR=127.0.0.1:0")
	return s.LoggedAddr(name, "api listening", "addr")
}

// LoggedAddr waits until process name logs a JSON line whose msg is msg and
// returns that line's field key: the address a service bound when told to
// listen on port 0 ("api listening"/"addr", "scheduler started"/"metrics",
// "serving health and metrics"/"addr").
func (s *Stack) LoggedAddr(name, msg, key string) string {
	s.t.Helper()
	var addr string
	s.Eventually(15*time.Second, name+" logs "+msg, func() bool {
		b, err := os.ReadFile(s.Proc(name).Log)
		if err != nil {
			return false
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			var rec map[string]any
			if json.Unmarshal(line, &rec) == nil && rec["msg"] == msg {
				addr, _ = rec[key].(string)
				return addr != ""
			}
		}
		return false
	})
	return addr
}
