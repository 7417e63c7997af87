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

// TestBrowserDashboard runs the dashboard's browser test
// (e2e/browser/dashboard.test.mjs: headless Chromium driven by
// playwright-core, with axe-core injected for the accessibility check)
// against a real stack. Debian's chromium and the npm
// packages of e2e/browser are installed first when missing; screenshots are
// kept under .data/browser/.
func TestBrowserDashboard(t *testing.T) {
	root, err := RepoRoot()
	require.NoError(t, err)
	dir := filepath.Join(root, "e2e", "browser")
	chromium := ensureChromium(t)
	ensurePlaywright(t, dir)

	s := Start(t, bins, Options{})
	shots := filepath.Join(root, ".data", "browser")
	require.NoError(t, os.MkdirAll(shots, 0o755))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "dashboard.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"CAPSTAN_API="+s.APIURL,
		"CAPSTAN_TOKEN="+stackToken(s),
		"CAPSTAN_DATA_DIR="+s.DataDir,
		"CAPSTAN_PROJECT="+project,
		"CAPSTAN_DOMAIN="+domain,
		"CAPSTAN_SCREENSHOTS="+shots,
		"CHROMIUM="+chromium,
	)
	out, err := cmd.CombinedOutput()
	t.Logf("browser test:\n%s", out)
	require.NoError(t, err, "the browser test failed; screenshots in %s", shots)
}

// stackToken is the bearer token the stack's api requires, "" when it
// requires none.
func stackToken(s *Stack) string { return s.Token }

// ensureChromium returns the path of Debian's chromium, installing it with
// apt-get when it is missing (as root, or through sudo without a password).
func ensureChromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	sudo := ""
	if os.Geteuid() != 0 {
		if exec.Command("sudo", "-n", "true").Run() != nil {
			t.Fatal("chromium is missing and installing it needs root: apt-get install -y chromium")
		}
		sudo = "sudo -n "
	}
	t.Log("installing chromium with apt-get")
	script := sudo + "apt-get update && " + sudo + "env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium"
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	require.NoError(t, err, "apt-get install chromium:\n%s", out)
	p, err := exec.LookPath("chromium")
	require.NoError(t, err)
	return p
}

// ensurePlaywright installs e2e/browser's locked npm packages (npm ci) when
// playwright-core or axe-core is missing.
func ensurePlaywright(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is missing: the browser test needs Node.js 20 or later and npm")
	}
	installed := true
	for _, pkg := range []string{"playwright-core", "axe-core"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			installed = false
		}
	}
	if installed {
		return
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm ci in %s:\n%s", dir, out)
}
