package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Binaries holds the paths of the built services.
type Binaries struct{ Dir string }

// Path returns the binary of service name (api, scheduler, ...).
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, "capstan-"+name) }

// Build compiles the four services into dir from the workspace at root,
// with the race detector unless release is true (benchmarks measure release
// builds).
func Build(root, dir string, release bool) (Binaries, error) {
	for _, s := range []string{"api", "scheduler", "abort-reconciler", "executor"} {
		args := []string{"build", "-race"}
		if release {
			args = args[:1]
		}
		cmd := exec.Command("go", append(args, "-o", filepath.Join(dir, "capstan-"+s), "./services/"+s)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return Binaries{}, fmt.Errorf("build %s: %v\n%s", s, err, out)
		}
	}
	return Binaries{Dir: dir}, nil
}

// RepoRoot finds the directory holding go.work above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found")
		}
		dir = parent
	}
}
