package supervisor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/stretchr/testify/require"
)

// TestRemovesLeftoversButThoseOfHeldAttempts: the supervisor lists the run
// directories (valid names only, in key order) and work directories of its
// data directory, and removes those it is asked to but for the run
// directory and work directory of an attempt it holds, until the attempt
// ends.
func TestRemovesLeftoversButThoseOfHeldAttempts(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	data := t.TempDir()
	s := newSupervisor(t, rec, supervisor.Config{DataDir: data})
	require.NoError(t, s.Start(spec(7, "sleep 600"))) // run proj/dev/run-1
	rec.await(t, 7, api.TaskStateRUNNING)
	mkdir := func(parts ...string) string {
		dir := filepath.Join(append([]string{data}, parts...)...)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644))
		return dir
	}
	gone, other := mkdir("runs", "proj", "dev", "gone"), mkdir("runs", "proj", "prod", "x")
	mkdir("runs", "proj", "dev", "Not_A_Run")
	leftover := mkdir("attempts", "8")
	mkdir("attempts", "not-an-id")
	held, heldWork := filepath.Join(data, "runs", "proj", "dev", "run-1"), filepath.Join(data, "attempts", "7")
	key := func(d, r string) domain.RunKey { return domain.RunKey{Project: "proj", Domain: d, Run: r} }

	keys, err := s.RunDirs()
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{key("dev", "gone"), key("dev", "run-1"), key("prod", "x")}, keys)
	ids, err := s.WorkDirs()
	require.NoError(t, err)
	require.Equal(t, []int64{7, 8}, ids)

	removed := s.RemoveRunDirs([]domain.RunKey{key("dev", "run-1"), key("dev", "gone"), key("..", "dev")})
	require.Equal(t, []domain.RunKey{key("dev", "gone")}, removed, "not the held attempt's run, nor a key that is no run's")
	require.NoDirExists(t, gone)
	require.DirExists(t, held)
	require.DirExists(t, other, "not asked")
	require.Equal(t, []int64{8}, s.RemoveWorkDirs([]int64{7, 8}), "not the held attempt's work directory")
	require.NoDirExists(t, leftover)
	require.DirExists(t, heldWork)

	killed, err := s.Abort(context.Background(), 7, workerapi.Aborted, "test")
	require.NoError(t, err)
	require.True(t, killed)
	require.Eventually(t, func() bool { return !s.Holds(7) }, waitFor, tick)
	require.Equal(t, []domain.RunKey{key("dev", "run-1")}, s.RemoveRunDirs([]domain.RunKey{key("dev", "run-1")}),
		"once the attempt has ended")
	require.NoDirExists(t, held)
}
