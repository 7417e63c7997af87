// Package storetest gives tests their own Postgres database with the real
// migrations applied, on the server scripts/dev-deps.sh starts. Each call
// clones a migrated template database, so a test costs one CREATE DATABASE.
package storetest

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/capstan-run/capstan/pkg/store"
	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// DefaultAdminURL is the dev-deps Postgres, used when CAPSTAN_TEST_DATABASE_URL
// is unset.
const DefaultAdminURL = "postgres://capstan@127.0.0.1:55432/postgres?sslmode=disable"

// AdminURL returns the URL of a database the tests may create databases from.
func AdminURL() string {
	if u := os.Getenv("CAPSTAN_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// NewURL creates a fresh migrated database for t, drops it when t ends, and
// returns its URL.
func NewURL(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(ctx) })
	if templateErr != nil {
		t.Fatalf("storetest: template database: %v (is scripts/dev-deps.sh start running?)", templateErr)
	}
	return newDB(t, templateName)
}

// NewEmptyURL creates a database without any migration applied for t,
// drops it when t ends, and returns its URL.
func NewEmptyURL(t testing.TB) string {
	t.Helper()
	return newDB(t, "template1")
}

// newDB creates a database for t from template, drops it when t ends, and
// returns its URL.
func newDB(t testing.TB, template string) string {
	t.Helper()
	ctx := context.Background()
	admin := open(t, AdminURL())
	name := "capstan_test_" + strings.ReplaceAll(uuid.NewString()[:18], "-", "")
	if _, err := admin.ExecContext(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, name, template)); err != nil {
		t.Fatalf("storetest: create database: %v", err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, name))
		admin.Close()
	})
	return withDB(AdminURL(), name)
}

// New returns a Store on a fresh migrated database for t.
func New(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), NewURL(t), store.Config{MaxOpenConns: 10})
	if err != nil {
		t.Fatalf("storetest: open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// NewWithDB returns a Store with cfg on a fresh migrated database for t,
// and a database/sql handle (pgx) on the same database for statements a
// test makes itself.
func NewWithDB(t testing.TB, cfg store.Config) (*store.Store, *sql.DB) {
	t.Helper()
	u := NewURL(t)
	s, err := store.Open(context.Background(), u, cfg)
	if err != nil {
		t.Fatalf("storetest: open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatalf("storetest: open database/sql: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return s, db
}

// ensureTemplate creates (once per migration set, across processes) a template
// database with every migration applied and returns its name.
func ensureTemplate(ctx context.Context) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "capstan_tmpl_" + sum
	admin, err := sql.Open("pgx", AdminURL())
	if err != nil {
		return "", err
	}
	defer admin.Close()
	conn, err := admin.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	// Serialise template creation across test processes.
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		return "", err
	}
	defer conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock(4242)`)
	var exists bool
	if err := conn.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).
		Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_new"
	_, _ = conn.ExecContext(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s`, building))
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`CREATE DATABASE %s`, building)); err != nil {
		return "", err
	}
	if err := store.Migrate(ctx, withDB(AdminURL(), building)); err != nil {
		return "", err
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`ALTER DATABASE %s RENAME TO %s`, building, name)); err != nil {
		return "", err
	}
	return name, nil
}

func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(store.Migrations(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(store.Migrations(), path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	})
	return hex.EncodeToString(h.Sum(nil))[:12], err
}

func open(t testing.TB, u string) *sql.DB {
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	return db
}

func withDB(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + name
	return u.String()
}
