package store

import (
	"context"

	"gorm.io/gorm"
)

// InTx runs fn in one transaction; fn's Store issues every query in it.
// The transaction begins at fn's first statement, on the pool that
// statement's repository asks for (prefer; else the pool InTx was called
// on), and commits when fn returns nil, after the run_events rows fn wrote
// are inserted in one statement (commit). Called on a transaction's Store,
// it runs fn in a savepoint whose rows join the transaction's (dropped when
// fn fails): they are inserted, under the feed lock, only at the outer
// commit, so the lock stays the last one taken. Errors: fn's, else the
// connection's, the insert's or the commit's; the transaction is rolled
// back on any of them, and when fn panics.
func (s *Store) InTx(ctx context.Context, fn func(tx *Store) error) error { return s.inTx(ctx, fn) }

// inTx is InTx.
func (s *core) inTx(ctx context.Context, fn func(tx *Store) error) error {
	if s.tx != nil {
		db, err := s.begin(ctx)
		if err != nil {
			return err
		}
		n, r, g := len(s.tx.events), len(s.tx.roots), len(s.tx.grown)
		err = db.WithContext(ctx).Transaction(func(*gorm.DB) error { return fn(&Store{s}) })
		if err != nil {
			s.tx.events, s.tx.roots, s.tx.grown = s.tx.events[:n], s.tx.roots[:r], s.tx.grown[:g]
		}
		return err
	}
	ts := &core{tx: &txState{pool: s}, root: s.root, ops: s.ops}
	defer ts.rollback()
	if err := fn(&Store{ts}); err != nil {
		return err
	}
	return ts.commit(ctx)
}

// begin returns the transaction of s, beginning it on s.tx.pool when no
// statement has yet. Errors: the pool's.
func (s *core) begin(ctx context.Context) (*gorm.DB, error) {
	if s.tx.db == nil {
		db := s.tx.pool.db.WithContext(ctx).Begin()
		if db.Error != nil {
			return nil, mapErr(db.Error)
		}
		s.tx.db = db
	}
	return s.tx.db, nil
}

// commit ends ts's transaction: it writes what ts owes (flushEvents), then
// commits. A transaction that issued no statement and left nothing commits
// nothing. Errors: flushEvents's, or the commit's.
func (ts *core) commit(ctx context.Context) error {
	if err := ts.flushEvents(ctx); err != nil {
		return err
	}
	if hold := beforeCommit(ctx); hold != nil {
		hold() // a test holds the transaction between the insert and the commit
	}
	if ts.tx.db == nil {
		return nil
	}
	ts.tx.done = true
	return mapErr(ts.tx.db.Commit().Error)
}

// flushEvents inserts the run_events rows ts left, makes the root moves it
// left and sends the notifications of both and of the attempts whose
// output grew, in one statement (eventsStatement). Errors: the insert's,
// mapped (mapErr).
func (ts *core) flushEvents(ctx context.Context) error {
	ins, err := ts.eventsStatement(ctx)
	if err != nil || ins == nil {
		return err
	}
	return mapErr(ins.Callback().Raw().Execute(ins).Error)
}

// rollback rolls back ts's transaction when it began and did not commit
// (fn failed or panicked, or the commit did not finish).
func (ts *core) rollback() {
	if ts.tx.db != nil && !ts.tx.done {
		_ = ts.tx.db.Rollback()
	}
}

// prefer returns the core that a statement written for pool p's planner
// settings (poolByKey, poolPass) runs on: that pool's, outside a
// transaction; the transaction itself inside one, which begins on p when
// this is its first statement.
func (s *core) prefer(p poolKind) *core {
	if s.tx == nil {
		return s.root.poolCore(p)
	}
	if s.tx.db == nil {
		s.tx.pool = s.root.poolCore(p)
	}
	return s
}

// poolKind names the pools of Open's Store other than the main one.
type poolKind int

const (
	// poolByKey (Config.ByKeyConns connections) is for the statements
	// that reach their rows by key, several keys at a time (in arrays or
	// lists), several times a second: a start batch's (TryLockRuns and
	// what follows it), an evaluation batch's (LockAndClaimAttempts and
	// what follows it), a report batch's about several attempts, the expiry
	// read, a schedule firing's (LockDueSchedules and what follows it). Its
	// connections keep one generic plan per statement, made from
	// index paths alone and made again as the tables grow (byKeySettings,
	// replanner): on the main pool Postgres would plan such a statement at
	// each call, and a plan kept from a new database's first minute would
	// scan the tables it was made for as they grow.
	poolByKey poolKind = iota + 1
	// poolPass is the one connection of a scheduling pass's statements
	// (the Placement repository's, outside a transaction; openPass).
	poolPass
)

// poolCore returns the core of Open's pool p (r is Open's core); a Store
// without that pool gives its own.
func (r *core) poolCore(p poolKind) *core {
	switch {
	case p == poolByKey && r.byKey != nil:
		return r.byKey.core
	case p == poolPass && r.pass != nil:
		return r.pass.st.core
	case p == poolPass:
		return r.poolCore(poolByKey)
	}
	return r
}

// q starts a statement: on s's pool, or in its transaction, which it
// begins first when no statement has yet; when beginning fails, the
// statement fails with its error.
func (s *core) q(ctx context.Context) *gorm.DB {
	if s.tx == nil {
		return s.db.WithContext(ctx)
	}
	tx, err := s.begin(ctx)
	if err != nil {
		db := s.tx.pool.db.WithContext(ctx)
		_ = db.AddError(err)
		return db
	}
	return tx.WithContext(ctx)
}
