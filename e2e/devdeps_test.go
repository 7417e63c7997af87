package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDevDepsNamesWhatToInstall: on a machine with no Postgres server
// binaries, no Homebrew and no apt-get, scripts/dev-deps.sh start stops
// with a message naming what to install on the common systems, and starts
// nothing.
func TestDevDepsNamesWhatToInstall(t *testing.T) {
	t.Parallel()
	root, err := RepoRoot()
	require.NoError(t, err)
	bin := t.TempDir()
	hidden := map[string]bool{"apt-get": true, "brew": true, "initdb": true, "pg_ctl": true, "postgres": true,
		"psql": true, "redis-server": true, "redis-sentinel": true, "redis-cli": true}
	for _, dir := range []string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			link := filepath.Join(bin, e.Name())
			if hidden[e.Name()] {
				continue
			}
			if _, err := os.Lstat(link); err == nil {
				continue
			}
			require.NoError(t, os.Symlink(filepath.Join(dir, e.Name()), link))
		}
	}
	data := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "scripts", "dev-deps.sh"), "start")
	cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir(), "CAPSTAN_DATA_DIR=" + data, "CAPSTAN_PG_LIBDIR=" + t.TempDir(),
		"CAPSTAN_PG_PORT=" + strconv.Itoa(FreePort(t)), "CAPSTAN_REDIS_PORT=" + strconv.Itoa(FreePort(t))}
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "no postgresql found")
	require.Contains(t, string(out), "brew install postgresql@15 redis")
	require.NoFileExists(t, filepath.Join(data, "postgres", "PG_VERSION"))
}
