package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain points the configuration at an empty directory, so that no
// test reads the user's contexts.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "capstan-config")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	for _, e := range []string{"CAPSTAN_API", "CAPSTAN_API_URL", "CAPSTAN_TOKEN", "CAPSTAN_PROJECT", "CAPSTAN_DOMAIN"} {
		os.Unsetenv(e)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs the CLI with args as they are (no --api).
func run(args ...string) (string, error) {
	root := newRoot()
	var out strings.Builder
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// Contexts are written 0600 under XDG_CONFIG_HOME; the current one gives
// the API, token, project and domain that no flag or variable gives; a
// variable beats it and a flag beats both.
func TestContexts(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	s, srv := newStandIn(t, http.StatusOK, "application/json", `{"runs":[]}`)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("cap_ctx\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run("config", "current-context"); err == nil {
		t.Error("current-context without one: no error")
	}
	for _, args := range [][]string{
		{"config", "set-context", "prod", "--api", srv, "--token-file", tokenFile, "-p", "shop", "-d", "prod"},
		{"config", "set-context", "other", "--api", "http://127.0.0.1:1"},
		{"config", "use-context", "prod"},
	} {
		if out, err := run(args...); err != nil {
			t.Fatalf("%q: %v %s", args, err, out)
		}
	}
	path := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "capstan", "config.yaml")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, mode %v, want 0600", path, err, fi.Mode())
	}
	if out, _ := run("config", "current-context"); out != "prod\n" {
		t.Errorf("current-context: %q", out)
	}
	if out, _ := run("config", "get-contexts"); !strings.Contains(out, "*        prod") || !strings.Contains(out, "other") {
		t.Errorf("get-contexts:\n%s", out)
	}
	if _, err := run("run", "list"); err != nil {
		t.Fatal(err)
	}
	got := s.received()
	if len(got) != 1 || got[0].path != "/v1/projects/shop/domains/prod/runs" || got[0].auth != "Bearer cap_ctx" {
		t.Errorf("the context's scope and token: %+v", got)
	}
	t.Setenv("CAPSTAN_PROJECT", "fromenv")
	t.Setenv("CAPSTAN_TOKEN", "cap_env")
	if _, err := run("run", "list", "-d", "fromflag"); err != nil {
		t.Fatal(err)
	}
	if got := s.received(); len(got) != 2 || got[1].path != "/v1/projects/fromenv/domains/fromflag/runs" || got[1].auth != "Bearer cap_env" {
		t.Errorf("env over the context, flag over both: %+v", got[len(got)-1])
	}
	if _, err := run("--context", "other", "run", "list"); exitCode(err) != exitAPI {
		t.Errorf("--context other: %v, want its unreachable API", err)
	}
	if _, err := run("--context", "nope", "run", "list"); exitCode(err) != exitUsage {
		t.Errorf("an unknown --context: %v, want a usage error", err)
	}
}
