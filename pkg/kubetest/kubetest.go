// Package kubetest gives the tests of the kubernetes plugin the test
// cluster that scripts/kube-deps.sh runs on loopback: a real API server,
// scheduler and controller manager, with kwok simulating a node. Kubeconfig
// starts it once per test process when it is not running (building its
// binaries the first time; `make test` starts it before the suite and stops
// it after), so a test that needs it never skips: a machine that cannot
// build or start it fails the test with the script's message. Stop, called
// from TestMain after the tests, stops the cluster again when Kubeconfig
// started it, so a test process leaves no cluster behind on the ports
// later runs use.
package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds `kube-deps.sh start`, a first build included.
const startTimeout = 20 * time.Minute

var (
	once       sync.Once
	kubeconfig string
	started    bool // this process's start brought the cluster up
	startErr   error
)

// Kubeconfig returns the path of the test cluster's kubeconfig (an admin
// token), starting the cluster when it does not answer. It fails t when
// the cluster cannot be started.
func Kubeconfig(t testing.TB) string {
	t.Helper()
	once.Do(func() { kubeconfig, started, startErr = start() })
	if startErr != nil {
		t.Fatalf("the test Kubernetes cluster (scripts/kube-deps.sh start) is needed and did not start: %v", startErr)
	}
	return kubeconfig
}

// Stop runs `scripts/kube-deps.sh stop` when Kubeconfig started the
// cluster in this process; a cluster that was running before (`make
// test`'s, or another test process's) is left running. It returns the
// script's error with its output.
func Stop() error {
	if !started {
		return nil
	}
	started = false
	script, err := findScript()
	if err != nil {
		return err
	}
	if out, err := exec.Command("bash", script, "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("kube-deps.sh stop: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// M is what a TestMain runs: *testing.M, or what wraps it.
type M interface{ Run() int }

// Stopping wraps m so that its Run stops the cluster (Stop) after the
// tests, for a TestMain that hands m on (goleak.VerifyTestMain).
func Stopping(m M) M { return stopping{m} }

type stopping struct{ m M }

func (s stopping) Run() int {
	code := s.m.Run()
	if err := Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// start runs `scripts/kube-deps.sh start` (a no-op when the cluster runs)
// and returns the KUBECONFIG it prints and whether it started the cluster.
func start() (string, bool, error) {
	script, err := findScript()
	if err != nil {
		return "", false, err
	}
	cmd := exec.Command("bash", script, "start")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return "", false, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		err = fmt.Errorf("not started within %s", startTimeout)
	}
	if err != nil {
		return "", false, fmt.Errorf("%w: %s", err, strings.TrimSpace(errb.String()))
	}
	var path string
	var up bool
	for _, line := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "KUBECONFIG="); ok {
			path = v
		}
		up = up || line == "CAPSTAN_KUBE_STARTED=1"
	}
	if path == "" {
		return "", up, fmt.Errorf("kube-deps.sh printed no KUBECONFIG: %s", out.String())
	}
	return path, up, nil
}

// findScript finds scripts/kube-deps.sh in the working directory or one of
// its parents (a test runs in its package's directory).
func findScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "kube-deps.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/kube-deps.sh not found above the working directory")
		}
		dir = parent
	}
}
