package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Due is what the leader's expiry pass must act on now.
type Due struct {
	// Deadlines are actions with a PENDING task past its scheduling deadline.
	Deadlines []domain.ActionKey
	// AttemptTimeouts are tasks whose current attempt has run (or built)
	// longer than the task's attempt timeout, at most one per action.
	AttemptTimeouts []TimedOut
	// Timeouts are started steps past their timeout (from their first
	// start), and runs past theirs (from their creation) as their a0.
	Timeouts []TimedOutAction
	// Waits are runs with a step whose timed wait (a suspend's duration, a
	// retry's backoff) has ended.
	Waits []domain.RunKey
}

// TimedOut is a task whose running attempt exceeded its attempt timeout.
type TimedOut struct {
	Action  domain.ActionKey
	TaskIdx int
	Timeout time.Duration
}

// TimedOutAction is a step, or a run (its a0), past its timeout.
type TimedOutAction struct {
	Action  domain.ActionKey
	Timeout time.Duration
}

// dueSQL is ExpiryDue's statement: one round trip for what every pass
// checks, each part on its own partial index, at most @limit rows each.
// The parts that want distinct rows read them in a subquery of their own
// (OFFSET 0): planned with the DISTINCT and LIMIT above it, the read of
// the waits walked the whole primary key of actions in the DISTINCT's
// order, on a plan that counted on the LIMIT to stop it early, where its
// partial index holds only the waiting actions.
var dueSQL = `
(SELECT DISTINCT 'deadline' AS kind, project, domain, run_name, action_name AS name, 0 AS idx, 0::bigint AS timeout_ms
	FROM (SELECT project, domain, run_name, action_name FROM tasks
		WHERE state IN ` + sqlPending + ` AND scheduling_deadline < now() OFFSET 0) d LIMIT @limit)
UNION ALL
(SELECT DISTINCT ON (project, domain, run_name, action_name) 'attempt', project, domain, run_name, action_name,
		idx, timeout_ms
	FROM (SELECT t.project, t.domain, t.run_name, t.action_name, t.idx, t.timeout_ms
		FROM tasks t JOIN attempts a ON a.task_id = t.id AND a.number = t.attempt_count
		WHERE t.timeout_ms > 0 AND t.state IN ` + sqlStarted + ` AND a.started_at IS NOT NULL
			AND a.started_at + t.timeout_ms * interval '1 millisecond' < now() OFFSET 0) x
	ORDER BY project, domain, run_name, action_name, idx LIMIT @limit)
UNION ALL
(SELECT 'step', project, domain, run_name, name, 0, timeout_ms FROM actions
	WHERE timeout_ms > 0 AND ended_at IS NULL AND started_at IS NOT NULL
		AND started_at + timeout_ms * interval '1 millisecond' < now() LIMIT @limit)
UNION ALL
(SELECT 'run', project, domain, name, 'a0', 0, timeout_ms FROM runs
	WHERE timeout_ms > 0 AND ended_at IS NULL AND created_at + timeout_ms * interval '1 millisecond' < now() LIMIT @limit)
UNION ALL
(SELECT DISTINCT 'wait', project, domain, run_name, '', 0, 0::bigint
	FROM (SELECT project, domain, run_name FROM actions
		WHERE waiting_for IS NOT NULL AND not_before <= now() AND ended_at IS NULL OFFSET 0) w LIMIT @limit)`

// ExpiryDue reads, in one statement, what the leader's expiry pass acts on:
// expired scheduling deadlines, attempts past their attempt timeout, steps
// and runs past their timeout, and timed waits that ended; at most limit of
// each. It runs on the by-key pool (poolByKey), whose plans keep to the
// partial indexes.
func (s Tasks) ExpiryDue(ctx context.Context, limit int) (Due, error) {
	s = Tasks{s.prefer(poolByKey)}
	var rows []struct {
		Kind, Project, Domain, RunName, Name string
		Idx                                  int
		TimeoutMs                            int64
	}
	if err := s.raw(ctx, dueSQL, map[string]any{"limit": limit}).Scan(&rows).Error; err != nil {
		return Due{}, mapErr(err)
	}
	var d Due
	for _, r := range rows {
		run := domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.RunName}
		timeout := time.Duration(r.TimeoutMs) * time.Millisecond
		switch r.Kind {
		case "deadline":
			d.Deadlines = append(d.Deadlines, run.Action(r.Name))
		case "attempt":
			d.AttemptTimeouts = append(d.AttemptTimeouts, TimedOut{Action: run.Action(r.Name), TaskIdx: r.Idx, Timeout: timeout})
		case "step", "run":
			d.Timeouts = append(d.Timeouts, TimedOutAction{Action: run.Action(r.Name), Timeout: timeout})
		case "wait":
			d.Waits = append(d.Waits, run)
		}
	}
	return d, nil
}

// NextWakeAt returns the earliest time a PENDING task's backoff or a step's
// timed wait ends, or nil when none is due later. It reads the two partial
// indexes alone, whatever statistics the tables have: the time is a
// parameter, not now(), since Postgres plans a statement without parameters
// once per connection whatever plan_cache_mode says (with a parameter, the
// plan is made again as the tables grow: poolPass, poolByKey), and the waits are
// not filtered on ended_at, which the index does not hold: a wait left on
// an ended action can only cost a pass that finds nothing to do.
func (s Placement) NextWakeAt(ctx context.Context) (*time.Time, error) {
	s = Placement{s.prefer(poolPass)}
	var at sql.NullTime
	err := scanRow(s.raw(ctx, `SELECT least(
		(SELECT min(not_before) FROM tasks WHERE state IN `+sqlPending+` AND not_before > @now),
		(SELECT min(not_before) FROM actions WHERE waiting_for IS NOT NULL AND not_before > @now))`,
		map[string]any{"now": time.Now().UTC()}), &at)

	if err != nil || !at.Valid {
		return nil, mapErr(err)
	}
	return &at.Time, nil
}
