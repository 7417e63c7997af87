package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for goose
	"github.com/pressly/goose/v3"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrate applies every pending versioned migration to the database at dsn.
// It is run by the one-shot `capstan-api migrate` command, never at service
// start.
func Migrate(ctx context.Context, dsn string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return fmt.Errorf("open postgres: %w", err)
	}
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, mustSub(migrations, "migrations"))
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// Migrations returns the embedded migration files (for tests and tools).
func Migrations() fs.FS { return mustSub(migrations, "migrations") }

// ErrMigrationsPending: the database's schema is behind the migrations this
// build embeds (run `capstan-api migrate`).
var ErrMigrationsPending = errors.New("migrations pending")

// MigrationsAtHead checks that every embedded migration is applied to the
// store's database (goose's version table). Errors: ErrMigrationsPending
// with the current and head versions, or the database's error.
func (s *Store) MigrationsAtHead(ctx context.Context) error {
	db, err := s.db.DB()
	if err != nil {
		return err
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, Migrations())
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	current, head, err := provider.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if current < head {
		return fmt.Errorf("%w: at %d, head %d", ErrMigrationsPending, current, head)
	}
	return nil
}
