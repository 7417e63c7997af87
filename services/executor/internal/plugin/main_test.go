package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/kubetest"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain stops the test cluster after the tests when they started it,
// and ignores the idle HTTP/2 connections to it that client-go's shared
// transport keeps: they are the transport's, not a plugin's.
func TestMain(m *testing.M) {
	proctest.Main(kubetest.Stopping(m), goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"))
}

const waitFor, tick = 10 * time.Second, 5 * time.Millisecond

// until calls Handle until the transition is final, within waitFor.
func until(t *testing.T, p plugin.Plugin, task *plugin.Task) (plugin.Transition, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		tr, err := p.Handle(ctx, task)
		if err != nil || tr.Ended() {
			return tr, err
		}
		require.NoError(t, ctx.Err(), "the work did not end")
	}
}

// fakeDocker returns the fake runtime's path and its log, private to t.
func fakeDocker(t *testing.T) (runtime, log string) {
	t.Helper()
	path, err := filepath.Abs("testdata/fakedocker/docker")
	require.NoError(t, err)
	log = filepath.Join(t.TempDir(), "docker.log")
	t.Setenv("FAKE_DOCKER_LOG", log)
	return path, log
}

// calls are the fake runtime's recorded calls, one line each.
func calls(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}
