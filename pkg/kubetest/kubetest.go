// Package kubetest gives the tests of the kubernetes plugin the test
// cluster that scripts/kube-deps.sh runs on loopback: a real API server,
// scheduler and controller manager, with kwok simulating a node. Kubeconfig
// starts it once per test process when it is not running (building its
// binaries the first time; `make test` starts it before the suite and stops
// it after), so a test that needs it never skips: a machine that cannot
// build or start it fails the test with the script's message.
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
	startErr   error
)

// Kubeconfig returns the path of the test cluster's kubeconfig (an admin
// token), starting the cluster when it does not answer. It fails t when
// the cluster cannot be started.
func Kubeconfig(t testing.TB) string {
	t.Helper()
	once.Do(func() { kubeconfig, startErr = start() })
	if startErr != nil {
		t.Fatalf("the test Kubernetes cluster (scripts/kube-deps.sh start) is needed and did not start: %v", startErr)
	}
	return kubeconfig
}

// start runs `scripts/kube-deps.sh start` (a no-op when the cluster runs)
// and returns the KUBECONFIG it prints.
func start() (string, error) {
	script, err := findScript()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("bash", script, "start")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return "", err
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
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(errb.String()))
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "KUBECONFIG="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("kube-deps.sh printed no KUBECONFIG: %s", out.String())
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
