package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Why the store binds statements itself. gorm's Raw rewrites a statement's
// text byte by byte at every call, looking for its ? and @name
// placeholders; the store's statements are a few kilobytes each, and the
// hot path sends a dozen of them a run. raw has gorm bind a text once, for
// stand-ins of its values, and reuses where each value went: BenchmarkBind
// (this package) measures both on AssignTasks' statement, and gorm's way
// costs about four times the CPU and three times the allocations of the
// bound one, some 15 µs more a statement on this machine's kind (2 cores).
// The values still go to the driver as they are (pgx encodes them), and
// every call that gorm would not bind plainly takes gorm's own way.

// raw is s.q(ctx).Raw(text, vars...) for a statement whose placeholders
// gorm has already resolved once (bound). A call whose values gorm would
// not bind as they are (a slice it expands into a list, an expression or a
// sub-query it writes into the text) takes gorm's own way, as does a
// statement called with other names than the first time.
func (s *core) raw(ctx context.Context, text string, vars ...any) *gorm.DB {
	tx := s.q(ctx)
	b, args, ok := bind(tx, text, vars)
	if !ok {
		return tx.Raw(text, vars...)
	}
	tx = tx.Raw("")
	tx.Statement.SQL.WriteString(b.sql)
	tx.Statement.Vars = args
	return tx
}

// exec is s.q(ctx).Exec(text, vars...) as raw binds it.
func (s *core) exec(ctx context.Context, text string, vars ...any) *gorm.DB {
	tx := s.raw(ctx, text, vars...)
	return tx.Callback().Raw().Execute(tx)
}

// bound is a statement as gorm wrote it for the Postgres driver ($1 … $n),
// and which value goes to each placeholder: the index of a positional one
// (slots, for a call of n values), or the name of a named one (names; keys
// is every name the binding call passed, and a later call must pass the
// same).
type bound struct {
	sql   string
	slots []int
	n     int
	names []string
	keys  map[string]bool
}

// boundStatements caches bind's work by statement text (nil: gorm's way
// only), for at most maxBound texts: a text made anew for each call would
// otherwise grow it without end.
var (
	boundStatements sync.Map // string → *bound
	boundCount      atomic.Int64
)

const maxBound = 2000

// slot and name stand for a statement's values while gorm binds it: plain
// values, which it binds as they are, in placeholder order.
type (
	slot int
	name string
)

// bind returns the statement of text bound for vars, and the values in
// placeholder order; ok false when gorm must write this call itself.
func bind(tx *gorm.DB, text string, vars []any) (*bound, []any, bool) {
	named, ok := namedValues(vars)
	if !ok || tx.Error != nil {
		return nil, nil, false
	}
	if named == nil {
		for _, v := range vars {
			if !plain(v) {
				return nil, nil, false
			}
		}
	}
	for _, v := range named {
		if !plain(v) {
			return nil, nil, false
		}
	}
	var b *bound
	if v, ok := boundStatements.Load(text); ok {
		b = v.(*bound)
	} else if boundCount.Load() < maxBound {
		b = bindOnce(tx, text, vars, named)
		if _, loaded := boundStatements.LoadOrStore(text, b); !loaded {
			boundCount.Add(1)
		}
	}
	switch {
	case b == nil || (b.keys == nil) != (named == nil):
		return nil, nil, false
	case named == nil:
		if len(vars) != b.n {
			return nil, nil, false
		}
		args := make([]any, len(b.slots))
		for i, j := range b.slots {
			args[i] = vars[j]
		}
		return b, args, true
	}
	if len(named) != len(b.keys) {
		return nil, nil, false
	}
	for k := range named {
		if !b.keys[k] {
			return nil, nil, false
		}
	}
	args := make([]any, len(b.names))
	for i, n := range b.names {
		args[i] = named[n]
	}
	return b, args, true
}

// bindOnce has gorm write text for stand-ins of vars (of named's values,
// when the call names them) and reads back where each went; nil when a
// value did not come back as a plain placeholder.
func bindOnce(tx *gorm.DB, text string, vars []any, named map[string]any) *bound {
	var stand []any
	b := &bound{n: len(vars)}
	if named != nil {
		m := make(map[string]any, len(named))
		b.keys = make(map[string]bool, len(named))
		for k := range named {
			m[k], b.keys[k] = name(k), true
		}
		stand = []any{m}
	} else {
		for i := range vars {
			stand = append(stand, slot(i))
		}
	}
	dry := tx.Session(&gorm.Session{DryRun: true, NewDB: true}).Raw(text, stand...)
	if dry.Error != nil {
		return nil
	}
	for _, v := range dry.Statement.Vars {
		switch v := v.(type) {
		case slot:
			if b.keys != nil {
				return nil
			}
			b.slots = append(b.slots, int(v))
		case name:
			if b.keys == nil {
				return nil
			}
			b.names = append(b.names, string(v))
		default:
			return nil
		}
	}
	b.sql = dry.Statement.SQL.String()
	return b
}

// namedValues returns the values of a call that names them (one map, or
// sql.NamedArgs), nil for positional values; ok false for a mix, or for
// values named by a struct's fields.
func namedValues(vars []any) (map[string]any, bool) {
	if len(vars) == 0 {
		return nil, true
	}
	if m, ok := vars[0].(map[string]any); ok {
		return m, len(vars) == 1
	}
	if _, ok := vars[0].(sql.NamedArg); !ok {
		return nil, true
	}
	m := make(map[string]any, len(vars))
	for _, v := range vars {
		a, ok := v.(sql.NamedArg)
		if !ok {
			return nil, false
		}
		m[a.Name] = a.Value
	}
	return m, true
}

// plain reports whether gorm binds v as it is, to one placeholder
// (Statement.AddVar): not an expression, a sub-query, a map or a slice it
// expands, unless v is a driver.Valuer or []byte.
func plain(v any) bool {
	switch v.(type) {
	case nil, string, bool, int, int16, int32, int64, float64, time.Time, *time.Time, *string, []byte,
		pgtype.Array[int64], pgtype.Array[string]:
		return true
	case sql.NamedArg, clause.Column, clause.Table, gorm.Valuer, clause.Interface, clause.Expression, *gorm.DB:
		return false
	case driver.Valuer:
		return true
	}
	switch reflect.TypeOf(v).Kind() {
	case reflect.Slice, reflect.Array, reflect.Map, reflect.Struct, reflect.Interface:
		return false
	}
	return true
}
