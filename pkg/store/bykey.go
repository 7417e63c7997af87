package store

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// byKeySettings are the settings of the by-key pool's connections
// (poolByKey): one generic plan per statement, made at its first call on
// the connection (no planning at each call, which for a start batch's root
// moves costs about half their execution), from index paths and nested
// loops alone. Its
// statements reach their rows by key, a few keys at a time, so the plan
// they want is the same at any table size; with sequential scans, hash
// and merge joins off, a plan made while the tables are nearly empty
// cannot be one that reads them whole. The join order, though, still
// follows the sizes at planning (a plan made on a few hundred actions may
// walk the whole primary key of actions for the name a0), hence
// replanner. JIT is off: a statement whose only path is a scan these
// settings disable is costed above jit_above_cost, and Postgres would
// compile it at every call.
var byKeySettings = map[string]string{
	"plan_cache_mode": "force_generic_plan",
	"enable_seqscan":  "off", "enable_hashjoin": "off", "enable_mergejoin": "off",
	"jit": "off",
}

// byKeyLocally is a select list that sets byKeySettings' planner settings
// for the rest of the caller's transaction (set_config, is_local): for a
// transaction on the main pool whose next statements reach their rows by
// key.
const byKeyLocally = `set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
	set_config('enable_mergejoin', 'off', true), set_config('jit', 'off', true)`

// replanner drops the plans of a pool's connections (DISCARD PLANS: their
// statements stay prepared) as they are used, so that each plan is made for
// tables of at least half the size they have when it runs, as long as they
// grow with the work done: a connection's plans made at its nth use are
// dropped at its use 2n + firstReplanUses, and at the latest replanEvery
// after they were made (tables that others grow). A connection so plans
// again at its uses 16, 48, 112, 240 and so on: under a start of load,
// within its first seconds. The schedule counts a connection's uses, not
// the pool's age, so a connection first used late on nearly empty tables
// still plans again as they grow. Once the tables are analyzed (autovacuum) Postgres makes the plans of
// their statements again itself.
type replanner struct {
	now   func() time.Time
	mu    sync.Mutex
	conns map[*pgx.Conn]*connPlans
}

// connPlans is what replanner knows of a connection's plans.
type connPlans struct {
	// uses counts the connection's uses (reuses from the pool); made is
	// the count its plans were made at (first seen, or last dropped), at
	// when.
	uses, made int64
	at         time.Time
}

// firstReplanUses is the use a connection's first plans are dropped at;
// maxTrackedConns bounds the connections replanner knows of. It cannot
// ask another connection whether it is closed (a pgx connection is for
// one goroutine at a time).
const (
	firstReplanUses = 16
	maxTrackedConns = 64
)

func newReplanner(now func() time.Time) *replanner {
	return &replanner{now: now, conns: map[*pgx.Conn]*connPlans{}}
}

// resetSession is the pool's hook before a connection is reused: it drops
// the connection's plans when they are due (replanner). Errors: Postgres's,
// which have database/sql drop the connection.
func (r *replanner) resetSession(ctx context.Context, c *pgx.Conn) error {
	r.mu.Lock()
	now := r.now()
	p, ok := r.conns[c]
	if !ok {
		if len(r.conns) >= maxTrackedConns {
			// Closed connections are never told of; forgetting them
			// all restarts the schedule of those still open.
			clear(r.conns)
		}
		p = &connPlans{at: now}
		r.conns[c] = p
	}
	p.uses++
	due := replanDue(*p, now)
	if due {
		p.made, p.at = p.uses, now
	}
	r.mu.Unlock()
	if !due {
		return nil
	}
	_, err := c.Exec(ctx, "DISCARD PLANS")
	return err
}

// replanDue reports whether the plans of p are to be made again at now
// (replanner).
func replanDue(p connPlans, now time.Time) bool {
	return p.uses >= 2*p.made+firstReplanUses || now.Sub(p.at) >= replanEvery
}
