package runner_test

import (
	"sync"
	"testing"

	"github.com/capstan-run/capstan/services/executor/internal/runner"
	"github.com/stretchr/testify/require"
)

func TestOnOutputSeesOutputWhileTheProcessRuns(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]string{}
	p, err := runner.Start(runner.Spec{Command: "echo one; echo two >&2; exec sleep 30", Dir: t.TempDir(),
		LogLimit: 64 << 10, OnOutput: func(stream string, b []byte) {
			mu.Lock()
			got[stream] += string(b)
			mu.Unlock()
		}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = p.Kill(0)
		p.Wait()
	})
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["stdout"] == "one\n" && got["stderr"] == "two\n"
	}, waitFor, tick)
	select {
	case <-p.Exited():
		require.FailNow(t, "the process should still run")
	default:
	}
	require.NoError(t, p.Kill(0))
	res := p.Wait()
	require.Equal(t, "one\n", string(res.Stdout), "the kept tail is unchanged")
}
