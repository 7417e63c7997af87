package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
)

// Binaries holds the paths of the built services.
type Binaries struct{ Dir string }

// Path returns the binary of service name (api, scheduler, ...).
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, "capstan-"+name) }

// allServices are the four services Build compiles.
var allServices = []string{"api", "scheduler", "abort-reconciler", "executor"}

// Build compiles the four services into dir from the workspace at root,
// with the race detector unless release is true (benchmarks measure release
// builds).
func Build(root, dir string, release bool) (Binaries, error) {
	for _, s := range allServices {
		if err := buildService(root, dir, s, release); err != nil {
			return Binaries{}, err
		}
	}
	return Binaries{Dir: dir}, nil
}

// WithRelease returns the binaries of b in dir, but a release build (no
// race detector) of each of release: for a test that measures what a
// service holds, which the race detector's shadow memory multiplies.
func WithRelease(root, dir string, b Binaries, release ...string) (Binaries, error) {
	for _, s := range allServices {
		var err error
		if slices.Contains(release, s) {
			err = buildService(root, dir, s, true)
		} else {
			err = os.Symlink(b.Path(s), filepath.Join(dir, "capstan-"+s))
		}
		if err != nil {
			return Binaries{}, err
		}
	}
	return Binaries{Dir: dir}, nil
}

// buildService compiles service s into dir, with the race detector unless
// release is true.
func buildService(root, dir, s string, release bool) error {
	args := []string{"build", "-race"}
	if release {
		args = args[:1]
	}
	cmd := exec.Command("go", append(args, "-o", filepath.Join(dir, "capstan-"+s), "./services/"+s)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", s, err, out)
	}
	return nil
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
