// Package store is Capstan's access to Postgres, the source of truth: gorm
// models, versioned SQL migrations, and the transactional operations the
// services compose. It turns gorm's errors into the domain errors below; code
// above it never imports gorm.
package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Errors callers branch on.
var (
	// ErrNotFound: the row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a row with the same key exists.
	ErrConflict = errors.New("already exists")
	// ErrTerminal: the action already reached a terminal phase.
	ErrTerminal = errors.New("already terminal")
)

// Store is Capstan's handle on Postgres: the pools, or one transaction
// (InTx). Its data is reached through repositories by aggregate (Runs,
// Actions, Tasks, Attempts, Placement, Workers, Aborts, Events, Logs,
// Cache, Tokens), each of which runs its statements on the Store it came
// from.
type Store struct{ *core }

// core is what a Store and its repositories share: the gorm handle they
// issue statements on, and what a transaction's statements leave for its
// end.
type core struct {
	db *gorm.DB
	// tx is what a transaction's statements leave for its end; nil
	// outside one.
	tx *txState
	// root is Open's core, whose pools prefer chooses from.
	root *core
	// byKey is the by-key pool (poolByKey); nil on its own Store and on a
	// transaction's.
	byKey *Store
	// replan drops the plans of byKey's connections as they are used;
	// nil but on Open's Store.
	replan *replanner
	// pass is the connection of Pass; nil but on Open's Store.
	pass *passConn
	// ops times statements by operation (Config.OperationSeconds) where
	// gorm's callbacks do not see them: flushEvents's; nil when not timed.
	ops *prometheus.HistogramVec
}

// txState is what a transaction's operations leave for InTx to write
// before it commits.
type txState struct {
	// events holds the run_events rows its operations wrote; InTx
	// inserts them in one statement.
	events []RunEvent
	// roots are the a0 moves SetRootPhase left for that statement to make
	// (rootMove); the transaction's next statement makes them first.
	roots []rootMove
	// grown are the attempts whose output its appends grew (outputGrew);
	// the commit notifies AttemptLogsChannel of each with its events.
	grown []int64
	// pool is the pool the transaction begins on; db is the transaction,
	// nil until its first statement begins it (begin); done is set once
	// it committed.
	pool *core
	db   *gorm.DB
	done bool
}

// Config tunes the connection pool.
type Config struct {
	// MaxOpenConns caps connections. Default 20.
	MaxOpenConns int
	// ByKeyConns caps the connections of the by-key pool. Default 8.
	ByKeyConns int
	// OperationSeconds, when set (NewOperationSeconds), times every
	// statement by operation. Default nil: statements are not timed.
	OperationSeconds *prometheus.HistogramVec
}

// Open connects to dsn (a postgres:// URL or key=value pairs) and pings
// it. The by-key pool connects on first use.
func Open(ctx context.Context, dsn string, cfg Config) (*Store, error) {
	db, err := openPool(dsn, nil, cfg.MaxOpenConns, cfg.OperationSeconds)
	if err != nil {
		return nil, err
	}
	s := &Store{&core{db: db, ops: cfg.OperationSeconds}}
	s.root = s.core
	s.replan = newReplanner(time.Now)
	byKey, err := openPool(dsn, byKeySettings, cmp.Or(cfg.ByKeyConns, 8), cfg.OperationSeconds,
		stdlib.OptionResetSession(s.replan.resetSession))
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	s.byKey = &Store{&core{db: byKey, root: s.core, ops: cfg.OperationSeconds}}
	if s.pass, err = openPass(dsn, s.core, cfg.OperationSeconds); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if err := s.Ping(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("ping postgres: %w", err), s.Close())
	}
	return s, nil
}

// openPool opens a pool of at most conns connections (default 20) to dsn,
// each with the settings params, its statements timed by ops when not nil,
// with the driver's options opts. It connects on first use.
func openPool(dsn string, params map[string]string, conns int, ops *prometheus.HistogramVec,
	opts ...stdlib.OptionOpenDB) (*gorm.DB, error) {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	maps.Copy(pc.RuntimeParams, params)
	sqlDB := stdlib.OpenDB(*pc, opts...)
	conns = cmp.Or(conns, 20)
	sqlDB.SetMaxOpenConns(conns)
	sqlDB.SetMaxIdleConns(conns)
	db, err := gorm.Open(quietDialector{postgres.New(postgres.Config{Conn: sqlDB}).(*postgres.Dialector)}, &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if ops != nil {
		if err := instrument(db, ops); err != nil {
			return nil, fmt.Errorf("instrument statements: %w", err)
		}
	}
	return db, nil
}

// quietDialector is gorm's Postgres dialector without the rendering of a
// statement with its values for a log line (Explain): gorm's Scan renders
// every statement so, for a logger, even a discarding one, which with the
// statements' JSON arguments is costly. The store logs no statement.
type quietDialector struct{ *postgres.Dialector }

// Explain returns sql as it is.
func (quietDialector) Explain(sql string, _ ...any) string { return sql }

// Close closes the pools.
func (s *Store) Close() error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	err = sqlDB.Close()
	if s.byKey != nil {
		err = errors.Join(err, s.byKey.Close())
	}
	if s.pass != nil {
		err = errors.Join(err, s.pass.st.Close())
	}
	return err
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// mapErr turns gorm and Postgres errors into the package's errors.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%w: %s", ErrConflict, pgErr.ConstraintName)
	}
	return err
}

// Literal state sets for the queries that should use a partial index. A
// prepared statement (pgx prepares each one per connection) soon runs a
// generic plan, and a generic plan cannot prove that `state = $1` implies an
// index's `WHERE state = 1`: it scans instead. So those queries write the
// states into their text.
var (
	// sqlPending is PENDING, the predicate of the tasks_pending* indexes.
	sqlPending = sqlStates(domain.TaskPending)
	// sqlLive is the live attempt states, attempts_live's predicate.
	sqlLive = sqlStates(domain.TaskBuilding, domain.TaskRunning, domain.TaskAssigned)
	// sqlUnfinished is PENDING and the live states: a task that has not
	// ended.
	sqlUnfinished = sqlStates(domain.TaskPending, domain.TaskBuilding, domain.TaskRunning, domain.TaskAssigned)
	// sqlStarted is BUILDING and RUNNING, tasks_running_timeout's predicate.
	sqlStarted = sqlStates(domain.TaskBuilding, domain.TaskRunning)
	// sqlAssigned is ASSIGNED, a subset of attempts_live's predicate.
	sqlAssigned = sqlStates(domain.TaskAssigned)
)

// Listing-only predicates, true of every row. The listing indexes
// (runs_list, cache_entries_created, run_events_scope) are partial on them,
// so that a lookup by key, which does not state them, never takes a listing
// index while the tables have no statistics yet (migration 00011); the
// listings state them.
const (
	sqlListedByCreation = "created_at > '-infinity'"
	sqlListedByID       = "id > 0"
)

// sqlStates renders states as a parenthesised SQL list: "(2, 3)".
func sqlStates(states ...domain.TaskState) string {
	parts := make([]string, len(states))
	for i, st := range states {
		parts[i] = strconv.Itoa(int(st))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// scanRows runs q, a statement that returns one row of JSON columns (each
// row_to_json of a row), and decodes column i into dest[i]. Errors:
// ErrNotFound when q returns no row.
func scanRows(q *gorm.DB, dest ...any) error {
	raw := make([][]byte, len(dest))
	ptrs := make([]any, len(dest))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	err := scanRow(q, ptrs...)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return mapErr(err)
	}
	if err := decodeEach(raw, dest...); err != nil {
		return fmt.Errorf("decode rows: %w", err)
	}
	return nil
}

// scanRow runs q, a statement that returns one row, and scans that row
// into dest. Errors: q's when it could not run (a transaction that failed
// to begin), sql.ErrNoRows when it returned no row, the scan's.
func scanRow(q *gorm.DB, dest ...any) error {
	if q.Error != nil {
		return q.Error
	}
	return q.Row().Scan(dest...)
}
