package store

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	"gorm.io/gorm"
)

// holdKey carries WithHold's function in a context.
type holdKey struct{}

// WithHold returns ctx whose InTx calls run hold between the insert of
// their events and their commit.
func WithHold(ctx context.Context, hold func()) context.Context {
	return context.WithValue(ctx, holdKey{}, hold)
}

func init() {
	beforeCommit = func(ctx context.Context) func() {
		hold, _ := ctx.Value(holdKey{}).(func())
		return hold
	}
}

// The listing-only predicates and the binds' statements, for the plan
// tests.
const (
	SQLListedByCreation = sqlListedByCreation
	SQLListedByID       = sqlListedByID
	AssignTasksSQL      = assignTasksSQL
)

// PreparedPlans returns the name of the statement prepared on s's
// connection whose text contains substr, and how many generic and custom
// plans Postgres made for it (pg_prepared_statements). Open s with one
// connection for the answer to be about the statements it ran.
func (s *Store) PreparedPlans(ctx context.Context, substr string) (name string, generic, custom int64, err error) {
	err = s.q(ctx).Raw(`SELECT name, generic_plans, custom_plans FROM pg_prepared_statements
		WHERE strpos(statement, ?) > 0`, substr).Row().Scan(&name, &generic, &custom)
	return name, generic, custom, err
}

// Explain returns the lines of EXPLAIN statement on s's connection, in s's
// transaction if it is one.
func (s *Store) Explain(ctx context.Context, statement string) (string, error) {
	rows, err := s.q(ctx).Raw("EXPLAIN " + statement).Rows()
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", err
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n"), rows.Err()
}

// PreparedParams returns the parameter types (as Postgres names them) of
// the statement prepared on s's connection whose text contains substr.
func (s *Store) PreparedParams(ctx context.Context, substr string) ([]string, error) {
	var types []string
	err := s.q(ctx).Raw(`SELECT unnest(parameter_types)::text FROM pg_prepared_statements
		WHERE strpos(statement, ?) > 0`, substr).Scan(&types).Error
	return types, err
}

// OnStatement has f called with the text and arguments of every statement
// s's pool sends (gorm's raw and row callbacks), as they go to Postgres.
func (s *Store) OnStatement(f func(sql string, vars []any)) error {
	cb := s.db.Callback()
	see := func(tx *gorm.DB) { f(tx.Statement.SQL.String(), tx.Statement.Vars) }
	if err := cb.Raw().After("gorm:raw").Register("test:see_raw", see); err != nil {
		return err
	}
	return cb.Row().After("gorm:row").Register("test:see_row", see)
}

// ShiftByKeyClock has the by-key pool's replanning read the time d later than it is.
func (s *Store) ShiftByKeyClock(d time.Duration) {
	s.replan.mu.Lock()
	defer s.replan.mu.Unlock()
	s.replan.now = func() time.Time { return time.Now().Add(d) }
}

// ReplanDue is replanDue for a connection used uses times, whose plans
// were made at its use made, at when.
func ReplanDue(uses, made int64, at, now time.Time) bool {
	return replanDue(connPlans{uses: uses, made: made, at: at}, now)
}

// Count runs stmt, a count, with args on s's pool or transaction.
// Exec runs stmt on s's connection, in s's transaction if it is one.
func (s *Store) Exec(ctx context.Context, stmt string) error {
	return s.q(ctx).Exec(stmt).Error
}

func (s *Store) Count(ctx context.Context, stmt string, args ...any) (int64, error) {
	var n int64
	err := s.q(ctx).Raw(stmt, args...).Row().Scan(&n)
	return n, err
}

// SetListenerTTL has ListenEvents register for ttl (renewing every ttl/4)
// until restore is called; only a test that does not run in parallel may
// call it, and it must stop its listeners before restore.
func SetListenerTTL(ttl time.Duration) (restore func()) {
	old := listenerTTL
	listenerTTL = ttl
	return func() { listenerTTL = old }
}

// ByKeyPool returns the Store of s's by-key pool (poolByKey).
func ByKeyPool(s *Store) *Store { return &Store{s.root.poolCore(poolByKey)} }

// PassConn returns the Store of s's pass connection (poolPass).
func PassConn(s *Store) *Store { return &Store{s.root.poolCore(poolPass)} }

// Replan is the pass connection's replanPass, for the newest id id.
func Replan(ctx context.Context, s *Store, id int64) (bool, error) { return s.replanPass(ctx, id) }

// MigrateTo applies the migrations up to version (up when the database is
// below it, down when above) to the database at dsn.
func MigrateTo(ctx context.Context, dsn string, version int64) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, Migrations())
	if err != nil {
		return err
	}
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		return err
	}
	if current > version {
		_, err = p.DownTo(ctx, version)
	} else {
		_, err = p.UpTo(ctx, version)
	}
	return err
}
