package store

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// SetRootPhase moves a run's root action a0 from phase from to phase to and
// sets the run row's phase to to (a terminal phase also sets both ended_at),
// and writes an "action.phase" event when a0 moved. The run row's phase
// mirrors a0's: it is set even when a0 was no longer in phase from. The
// caller holds the run's lock.
//
// In a transaction the move is left for the transaction's next statement,
// which makes it first (q), or, when there is none, for the insert of the
// transaction's events at commit (flushEvents): the move that usually ends
// a transaction costs no statement of its own. Either way every statement
// after the call sees the move, and its event keeps its place among the
// transaction's events (the move is made before any later event is
// written). Outside a transaction it makes its own.
func (s *Store) SetRootPhase(ctx context.Context, key domain.RunKey, from, to domain.Phase, now time.Time) error {
	if s.tx == nil {
		return s.InTx(ctx, func(tx *Store) error { return tx.SetRootPhase(ctx, key, from, to, now) })
	}
	if err := s.makeRootMove(ctx); err != nil {
		return err
	}
	if err := s.event(ctx, key, domain.RootActionName, "action.phase", map[string]any{"from": from, "to": to}); err != nil {
		return err
	}
	s.tx.root = &rootMove{key: key, from: from, to: to, now: now}
	return nil
}

// rootMove is a root move SetRootPhase left; its "action.phase" event is
// the last of the transaction's events while it waits.
type rootMove struct {
	key      domain.RunKey
	from, to domain.Phase
	now      time.Time
}

// args are the named arguments of rootMoveCTE.
func (m *rootMove) args() map[string]any {
	return map[string]any{"p": m.key.Project, "d": m.key.Domain, "r": m.key.Run, "root": domain.RootActionName,
		"from": string(m.from), "to": string(m.to), "now": m.now, "terminal": m.to.IsTerminal()}
}

// makeRootMove makes the root move left in the transaction, if any, in a
// statement of its own, and drops its event when a0 was not in the move's
// phase.
func (s *Store) makeRootMove(ctx context.Context) error {
	if s.tx == nil || s.tx.root == nil {
		return nil
	}
	m := s.tx.root
	s.tx.root = nil
	var moved int
	if err := s.q(ctx).Raw(rootMoveCTE+` SELECT moved FROM r`, m.args()).Scan(&moved).Error; err != nil {
		return mapErr(err)
	}
	if moved == 0 {
		s.tx.events = s.tx.events[:len(s.tx.events)-1]
	}
	return nil
}

// rootMoveCTE moves a0 (a) and the run row (r, whose moved counts a0's
// rows moved, 0 or 1).
const rootMoveCTE = `WITH a AS (UPDATE actions SET phase = @to, updated_at = @now, version = version + 1,
	  ended_at = CASE WHEN @terminal THEN @now ELSE ended_at END
	  WHERE project = @p AND domain = @d AND run_name = @r AND name = @root AND phase = @from RETURNING 1),
	r AS (UPDATE runs SET phase = @to, updated_at = @now, version = version + 1,
	  ended_at = CASE WHEN @terminal THEN @now ELSE ended_at END
	  WHERE project = @p AND domain = @d AND name = @r RETURNING (SELECT count(*) FROM a) AS moved)`

// rootMoveSQL makes a root move and inserts the transaction's events, as
// insertEventsSQL does, in one statement; the last event (@last, the
// move's) only when a0 moved.
const rootMoveSQL = rootMoveCTE + `
` + eventsInsert + `
  FROM ROWS FROM (jsonb_to_recordset(CAST(@rows AS jsonb)) AS (` + eventsRecord + `))
       WITH ORDINALITY AS e(project, domain, run_name, action_name, task_id, attempt_id, type, data, created_at, ord)
 WHERE (e.ord < @last OR (SELECT moved FROM r) > 0)
   AND ` + eventsLocksAndNotices
