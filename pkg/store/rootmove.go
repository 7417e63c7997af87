package store

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// SetRootPhase moves a run's root action a0 from phase from to phase to and
// sets the run row's phase to to (a terminal phase also sets both ended_at
// and the run's expires_at, expiresAtSQL),
// and writes an "action.phase" event when a0 moved. The run row's phase
// mirrors a0's: it is set even when a0 was no longer in phase from. The
// caller holds the run's lock.
//
// In a transaction the move is written with the transaction's events, in
// the statement that inserts them at commit (flushEvents): the move that
// usually ends a transaction costs no statement of its own, and the moves
// of several runs (a batch of starts or evaluations) are made together.
// Statements of the transaction after the call do not see the move; a
// second move of the same run makes the first one at once. The move's
// event keeps its place among the transaction's events (dropped there when
// a0 did not move). Outside a transaction it makes its own.
func (s Actions) SetRootPhase(ctx context.Context, key domain.RunKey, from, to domain.Phase, now time.Time) error {
	if s.tx == nil {
		return s.inTx(ctx, func(tx *Store) error { return tx.actions().SetRootPhase(ctx, key, from, to, now) })
	}
	for _, m := range s.tx.roots {
		if m.key == key { // a second move of the same run follows the first
			if err := s.makeRootMoves(ctx); err != nil {
				return err
			}
			break
		}
	}
	if err := s.event(ctx, key, domain.RootActionName, "action.phase", map[string]any{"from": from, "to": to}); err != nil {
		return err
	}
	s.tx.roots = append(s.tx.roots, rootMove{key: key, from: from, to: to, now: now, ord: len(s.tx.events)})
	return nil
}

// rootMove is a root move SetRootPhase left; its "action.phase" event is
// the transaction's event of ordinal ord (1-based).
type rootMove struct {
	key      domain.RunKey
	from, to domain.Phase
	now      time.Time
	ord      int
}

// rootMovesArgs are the named arguments of rootMovesSQL(moves): scalars
// for one move; else one array per field (unnest's estimate of 10 rows
// keeps Postgres's plans on the primary keys, where jsonb_to_recordset's
// 100 made it scan both tables; see poolByKey for the generic plans).
func rootMovesArgs(moves []rootMove) map[string]any {
	if len(moves) == 1 {
		m := moves[0]
		return map[string]any{"mp": m.key.Project, "md": m.key.Domain, "mr": m.key.Run, "mf": string(m.from),
			"mt": string(m.to), "mnow": m.now, "mterminal": m.to.IsTerminal(), "mord": m.ord, "root": domain.RootActionName}
	}
	n := len(moves)
	p, d, r, from, to := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	now, terminal, ord := make([]string, n), make([]string, n), make([]string, n)
	for i, m := range moves {
		p[i], d[i], r[i], from[i], to[i] = m.key.Project, m.key.Domain, m.key.Run, string(m.from), string(m.to)
		now[i], terminal[i] = m.now.Truncate(time.Microsecond).Format(time.RFC3339Nano), strconv.FormatBool(m.to.IsTerminal())
		ord[i] = strconv.Itoa(m.ord)
	}
	// Text arrays all (Strings): gorm would spread a plain slice into a
	// list. The times are cut to microseconds, as pgx writes a time.
	return map[string]any{"mp": Strings(p), "md": Strings(d), "mr": Strings(r), "mf": Strings(from), "mt": Strings(to),
		"mnow": Strings(now), "mterminal": Strings(terminal), "mord": Strings(ord), "root": domain.RootActionName}
}

// rootMovesSQL is the CTE that makes moves (rootMoveCTE for one, in
// scalars; rootMovesCTE for several, in arrays) followed by tail. One move,
// the usual case, stays in scalars: Postgres plans that statement once (a
// generic plan), where on the main pool the arrays' statement is planned
// afresh at each call (its plan for the arrays' true length looks cheaper
// than the generic one).
func rootMovesSQL(moves []rootMove, tail string) string {
	if len(moves) == 1 {
		return rootMoveCTE + tail
	}
	return rootMovesCTE + tail
}

// makeRootMoves makes the root moves left in the transaction, if any, in
// one statement, and drops the events of those whose a0 was not in the
// move's phase.
func (s *core) makeRootMoves(ctx context.Context) error {
	if s.tx == nil || len(s.tx.roots) == 0 {
		return nil
	}
	moves := s.tx.roots
	s.tx.roots = nil
	var moved []int
	if err := s.raw(ctx, rootMovesSQL(moves, ` SELECT ord FROM a`), rootMovesArgs(moves)).Scan(&moved).Error; err != nil {
		return mapErr(err)
	}
	drop := map[int]bool{}
	for _, m := range moves {
		drop[m.ord] = !slices.Contains(moved, m.ord)
	}
	kept := s.tx.events[:0]
	for i, e := range s.tx.events {
		if !drop[i+1] {
			kept = append(kept, e)
		}
	}
	s.tx.events = kept
	return nil
}

// rootMoveCTE moves the a0 (a, returning the move's ordinal when a0
// moved) and the run row (r) of one move in scalars (@mp to @mord).
var rootMoveCTE = `WITH m AS (SELECT CAST(@mord AS bigint) AS ord),
	a AS (UPDATE actions SET phase = @mt, updated_at = @mnow, version = version + 1,
	  ended_at = CASE WHEN @mterminal THEN @mnow ELSE ended_at END
	  WHERE project = @mp AND domain = @md AND run_name = @mr AND name = @root AND phase = @mf
	  RETURNING CAST(@mord AS bigint) AS ord),
	r AS (UPDATE runs SET phase = @mt, updated_at = @mnow, version = version + 1,
	  ended_at = CASE WHEN @mterminal THEN @mnow ELSE ended_at END,
	  expires_at = ` + expiresAtSQL("runs", "CAST(@mt AS text)", "CAST(@mnow AS timestamptz)", "CAST(@mterminal AS boolean)") + `
	  WHERE project = @mp AND domain = @md AND name = @mr RETURNING 1)`

// rootMovesCTE moves the a0s (a, returning the ordinals of the moves whose
// a0 moved) and the run rows (r) of the moves (m, from the arrays @mp to
// @mord), each run at most once. The a0s are reached from m, the root's
// name a column of it behind a fence (OFFSET 0): with the name a parameter
// of the join, a plan made while actions held a few rows walked the whole
// primary key of actions for it, and the by-key pool kept that plan until its
// next replanning.
var rootMovesCTE = `WITH m AS (SELECT * FROM unnest(CAST(CAST(@mp AS text) AS text[]),
	  CAST(CAST(@md AS text) AS text[]), CAST(CAST(@mr AS text) AS text[]), CAST(CAST(@mf AS text) AS text[]),
	  CAST(CAST(@mt AS text) AS text[]), CAST(CAST(@mnow AS text) AS timestamptz[]),
	  CAST(CAST(@mterminal AS text) AS boolean[]), CAST(CAST(@mord AS text) AS bigint[]))
	  AS m(p, d, r, f, t, now, terminal, ord)),
	a AS (UPDATE actions x SET phase = m.t, updated_at = m.now, version = x.version + 1,
	  ended_at = CASE WHEN m.terminal THEN m.now ELSE x.ended_at END
	  FROM (SELECT m.*, CAST(@root AS text) AS n FROM m OFFSET 0) m
	  WHERE x.project = m.p AND x.domain = m.d AND x.run_name = m.r AND x.name = m.n AND x.phase = m.f
	  RETURNING m.ord),
	r AS (UPDATE runs x SET phase = m.t, updated_at = m.now, version = x.version + 1,
	  ended_at = CASE WHEN m.terminal THEN m.now ELSE x.ended_at END,
	  expires_at = ` + expiresAtSQL("x", "m.t", "m.now", "m.terminal") + `
	  FROM m WHERE x.project = m.p AND x.domain = m.d AND x.name = m.r RETURNING 1)`

// rootMoveSQL makes the root moves (rootMovesSQL) and inserts the
// transaction's events, as insertEventsSQL does, in one statement; a move's
// event (the event of its ordinal) only when its a0 moved.
func rootMoveSQL(moves []rootMove) string {
	return rootMovesSQL(moves, `
`+eventsInsert+`
  FROM ROWS FROM (jsonb_to_recordset(CAST(@rows AS jsonb)) AS (`+eventsRecord+`))
       WITH ORDINALITY AS e(project, domain, run_name, action_name, task_id, attempt_id, type, data, created_at, ord)
 WHERE (e.ord NOT IN (SELECT ord FROM m) OR e.ord IN (SELECT ord FROM a))
   AND `+eventsLocksAndNotices)
}
