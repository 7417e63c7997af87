package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTypeScriptSDK builds the TypeScript SDK (sdk/typescript: npm ci when
// its node_modules is missing or older than its lock, then tsc, which also
// compiles its type tests) and runs its tests (node --test): its event
// stream parser's, and its live ones against a real stack. Without node it
// skips, except on CI (CI=true), where it fails.
func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is missing: the TypeScript SDK's tests need Node.js 20 or later and npm")
		}
		t.Skip("node is missing: the TypeScript SDK's tests need Node.js 20 or later and npm")
	}
	root, err := RepoRoot()
	require.NoError(t, err)
	dir := filepath.Join(root, "sdk", "typescript")
	ensureNpmPackages(t, dir)
	npmCommand(t, dir, 3*time.Minute, nil, filepath.Join("node_modules", ".bin", "tsc"), "-p", ".")

	s := Start(t, bins, Options{Executors: 1})
	npmCommand(t, dir, 5*time.Minute, []string{
		"CAPSTAN_API=" + s.APIURL,
		"CAPSTAN_TOKEN=" + s.Token,
		"CAPSTAN_PROJECT=" + project,
		"CAPSTAN_DOMAIN=" + domain,
	}, "node", "--test", "--test-reporter=spec",
		filepath.Join("dist", "test", "sse.test.js"), filepath.Join("dist", "test", "live.test.js"))
}

// ensureNpmPackages installs dir's locked npm packages (npm ci) when its
// node_modules is missing or older than package-lock.json, as make lint
// does for openapi/.
func ensureNpmPackages(t *testing.T, dir string) {
	t.Helper()
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	require.NoError(t, err)
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err == nil && installed.ModTime().After(lock.ModTime()) {
		return
	}
	npmCommand(t, dir, 5*time.Minute, nil, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
}

// npmCommand runs a command in dir with env added, failing t with its output when
// it exits nonzero or outlives timeout, else logging it.
func npmCommand(t *testing.T, dir string, timeout time.Duration, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v in %s failed:\n%s", name, args, dir, out)
	t.Logf("%s %v:\n%s", name, args, out)
}
