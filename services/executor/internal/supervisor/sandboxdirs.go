package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
)

// prepareSandboxed makes the data directory's attempts/ and runs/ 0711 (an
// attempt passes through them to its own directories but lists neither),
// and checks that every directory from / to dataDir lets any user pass
// (o+x): a sandboxed attempt's user is no account of the host. Errors: a
// directory that does not let them pass, or cannot be made.
func prepareSandboxed(dataDir string) error {
	for _, sub := range []string{"attempts", "runs"} {
		dir := filepath.Join(dataDir, sub)
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
	}
	for dir := dataDir; ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("data dir: %s is mode %04o: sandboxed attempts, each its own user, cannot pass "+
				"through it to their directories (chmod o+x %s, or pick another CAPSTAN_DATA_DIR)",
				dir, fi.Mode().Perm(), dir)
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}
