package store

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// byKeySettings are the settings of ByKey's connections: one generic plan
// per statement, made at its first call on the connection (no planning at
// each call: a start batch's root moves cost 1.7 ms of planning against
// 4 ms of execution), from index paths and nested loops alone. Its
// statements reach their rows by key, a few keys at a time, so the plan
// they want is the same at any table size; with sequential scans, hash
// and merge joins off, a plan made while the tables are nearly empty
// cannot be one that reads them whole. The join order, though, still
// follows the sizes at planning (a start batch's root moves, planned on a
// few hundred actions, walked the whole primary key of actions for the
// name a0), hence replanner.
var byKeySettings = map[string]string{
	"plan_cache_mode": "force_generic_plan",
	"enable_seqscan":  "off", "enable_hashjoin": "off", "enable_mergejoin": "off",
}

// replanner drops the plans of a pool's connections (DISCARD PLANS: their
// statements stay prepared) as the pool ages, so that each plan is made
// for tables of at least half the size they have when it runs, as long as
// they grow at most steadily from the pool's start: a connection's plans
// made at age a (since the pool opened) are dropped at its next use after
// age 2a, and at the latest replanEvery after they were made (tables that
// grow from empty after a quiet start). A connection so plans again at
// the pool's ages 0.25 s, 0.5 s, 1 s, 2 s and so on, then every 10 s, each
// time at its next use: about 15 statements of 1-2 ms each.
type replanner struct {
	opened time.Time
	now    func() time.Time
	mu     sync.Mutex
	// made is when each connection's plans were made (first used, or
	// last dropped).
	made map[*pgx.Conn]time.Time
}

// firstReplan is the age the first plans of a new pool are dropped at.
const firstReplan = 250 * time.Millisecond

func newReplanner(now func() time.Time) *replanner {
	return &replanner{opened: now(), now: now, made: map[*pgx.Conn]time.Time{}}
}

// resetSession is the pool's hook before a connection is reused: it drops
// the connection's plans when they are due (replanner). Errors: Postgres's,
// which have database/sql drop the connection.
func (r *replanner) resetSession(ctx context.Context, c *pgx.Conn) error {
	r.mu.Lock()
	now := r.now()
	made, ok := r.made[c]
	if !ok {
		r.forgetClosed()
		r.made[c] = now
	}
	due := ok && replanDue(r.opened, made, now)
	if due {
		r.made[c] = now
	}
	r.mu.Unlock()
	if !due {
		return nil
	}
	_, err := c.Exec(ctx, "DISCARD PLANS")
	return err
}

// replanDue reports whether plans made at made, on a pool opened at opened,
// are to be made again at now (replanner).
func replanDue(opened, made, now time.Time) bool {
	return now.Sub(made) >= min(max(made.Sub(opened), firstReplan), replanEvery)
}

// forgetClosed drops the closed connections from made. The caller holds
// mu.
func (r *replanner) forgetClosed() {
	for c := range r.made {
		if c.IsClosed() {
			delete(r.made, c)
		}
	}
}
