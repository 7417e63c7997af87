package runner_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/stretchr/testify/require"
)

// Not parallel: the reaper reaps any orphan of the test process, and must
// be stopped before the parallel tests wait for their own children.
func TestReapOrphansReapsKilledGrandchildren(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- runner.ReapOrphans(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() {
		cancel()
		require.NoError(t, <-stopped)
	}()

	pidfile := filepath.Join(t.TempDir(), "pid")
	// The grandchild ignores SIGTERM, so it outlives its shell and dies an
	// orphan when the group is swept with SIGKILL.
	p := start(t, "(trap '' TERM; exec sleep 600) & echo $! > "+pidfile+"; wait")
	orphan := readPid(t, pidfile)
	require.NoError(t, p.Kill(5*time.Second))
	require.Eventually(t, func() bool { return errors.Is(syscall.Kill(orphan, 0), syscall.ESRCH) }, waitFor, tick,
		"the killed grandchild is reaped, not left a zombie")
}
