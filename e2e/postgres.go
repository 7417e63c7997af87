package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/store"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// Postgres is a private Postgres server for one test, on a loopback port
// and a data directory of its own, with Capstan's database migrated: a test
// that pauses or kills Postgres runs its stack on one of these, never on
// the server scripts/dev-deps.sh starts, which other tests share.
type Postgres struct {
	// URL is the migrated capstan database's.
	URL string
	t   testing.TB
	cmd *exec.Cmd
	dir string
}

// StartPostgres starts a private server (initdb and postgres from PATH, or
// Debian's /usr/lib/postgresql/<major>/bin), creates and migrates the
// capstan database, and stops the server and removes its files when t ends.
// Each of settings ("name=value") is passed to the server with -c, after
// the defaults (e.g. "shared_preload_libraries=pg_stat_statements"). Run
// as root, the server runs as the user postgres, since initdb refuses
// root. Whatever it lacks fails t: it never skips.
func StartPostgres(t testing.TB, settings ...string) *Postgres {
	t.Helper()
	bin := pgBinDir(t)
	dir, err := os.MkdirTemp("", "capstan-e2e-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &Postgres{t: t, dir: dir}
	t.Cleanup(p.stop)
	cred := pgCredential(t, dir)
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "capstan", "--auth=trust", "-E", "UTF8",
		"--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := freePort(t)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{"-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "fsync=off",
		"-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=100"}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	p.cmd = exec.Command(filepath.Join(bin, "postgres"), args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	admin := fmt.Sprintf("postgres://capstan@127.0.0.1:%d/postgres?sslmode=disable", port)
	p.URL = fmt.Sprintf("postgres://capstan@127.0.0.1:%d/capstan?sslmode=disable", port)
	p.await(admin)
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE DATABASE capstan`); err != nil {
		t.Fatalf("create database: %v", err)
	}
	if err := store.Migrate(context.Background(), p.URL); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return p
}

// pgBinDir returns the directory of initdb and postgres.
func pgBinDir(t testing.TB) string {
	if b, err := exec.LookPath("initdb"); err == nil {
		if d := filepath.Dir(b); fileExists(filepath.Join(d, "postgres")) {
			return d
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if fileExists(filepath.Join(dirs[i], "initdb")) && fileExists(filepath.Join(dirs[i], "postgres")) {
			return dirs[i]
		}
	}
	t.Fatal("no Postgres server binaries (initdb, postgres) on PATH or under /usr/lib/postgresql")
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// pgCredential returns the credential the server runs with: none (the
// test's own user) unless the test runs as root, then postgres's, which
// is given dir.
func pgCredential(t testing.TB, dir string) *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("run as root, the private Postgres needs the user postgres: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// await waits until the server answers on url.
func (p *Postgres) await(url string) {
	p.t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		p.t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for db.Ping() != nil {
		if time.Now().After(deadline) {
			p.t.Fatalf("private postgres did not answer within 30s:\n%s", tail(filepath.Join(p.dir, "server.log"), 30))
		}
		<-time.After(50 * time.Millisecond) // the polling interval
	}
}

// pids returns the server's processes: the postmaster first, then its
// children (backends, checkpointer, walwriter…).
func (p *Postgres) pids() []int {
	pm := p.cmd.Process.Pid
	out := []int{pm}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pm) {
			out = append(out, pid)
		}
	}
	return out
}

// Pause stops every process of the server (SIGSTOP), the postmaster first
// so that it forks no new one: connections stay open, and every statement
// waits, as on a frozen host or a stalled failover.
func (p *Postgres) Pause() {
	p.t.Helper()
	for _, pid := range p.pids() {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			p.t.Fatalf("SIGSTOP postgres %d: %v", pid, err)
		}
	}
}

// Resume continues every process of the server (SIGCONT), the postmaster
// last.
func (p *Postgres) Resume() {
	p.t.Helper()
	pids := p.pids()
	for i := len(pids) - 1; i >= 0; i-- {
		if err := syscall.Kill(pids[i], syscall.SIGCONT); err != nil {
			p.t.Fatalf("SIGCONT postgres %d: %v", pids[i], err)
		}
	}
}

// stop continues the server if paused, shuts it down fast (SIGINT) and
// removes its files.
func (p *Postgres) stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		for _, pid := range p.pids() {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	if p.t.Failed() {
		p.t.Logf("---- private postgres log (tail) ----\n%s", tail(filepath.Join(p.dir, "server.log"), 40))
	}
	_ = os.RemoveAll(p.dir)
}
