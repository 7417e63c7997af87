package store

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// bind writes what gorm writes for the calls whose values it binds as they
// are, from the second call on as from the first, and leaves to gorm the
// calls it would write otherwise: a list it expands, an expression it
// inlines, other names than the statement's first call's.
func TestBindWritesWhatGormWrites(t *testing.T) {
	t.Parallel()
	conn, err := sql.Open("pgx", "postgres://127.0.0.1:1/none") // never dialled: every build is dry
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: conn}),
		&gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
	require.NoError(t, err)
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		text string
		vars []any
		fast bool
	}{
		{"named, repeated, beside an operator with @", `SELECT @a, CAST(@ids AS bigint[]) FROM t WHERE x = @a AND j @> '{}'`,
			[]any{map[string]any{"a": 1, "ids": array([]int64{1, 2})}}, true},
		{"sql.Named", "SELECT @b,\n@a", []any{sql.Named("a", "x"), sql.Named("b", at)}, true},
		{"positional", `SELECT ?, (?), ? FROM t`, []any{int64(7), "x", nil}, true},
		{"positional in a text with @", `SELECT ? WHERE j @> ?`, []any{[]byte(`{}`), &at}, true},
		{"a list gorm expands", `SELECT 1 WHERE id IN ?`, []any{[]int64{1, 2}}, false},
		{"an expression gorm inlines", `UPDATE t SET v = @v`, []any{map[string]any{"v": gorm.Expr("v + 1")}}, false},
	} {
		want := db.Session(&gorm.Session{DryRun: true}).Raw(c.text, c.vars...).Statement
		for range 2 {
			b, args, ok := bind(db, c.text, c.vars)
			require.Equal(t, c.fast, ok, c.name)
			if ok {
				require.Equal(t, want.SQL.String(), b.sql, c.name)
				require.Equal(t, want.Vars, args, c.name)
			}
		}
	}
	text := `SELECT @a, @b`
	_, _, ok := bind(db, text, []any{map[string]any{"a": 1, "b": 2}})
	require.True(t, ok)
	_, _, ok = bind(db, text, []any{map[string]any{"a": 1, "c": 2}})
	require.False(t, ok, "other names than the first call's")
	_, _, ok = bind(db, `SELECT ?, ?`, []any{1, 2})
	require.True(t, ok)
	_, _, ok = bind(db, `SELECT ?, ?`, []any{1})
	require.False(t, ok, "another count of values than the first call's")
}
