package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
)

// Every state change writes a run_events row in its transaction: the audit
// trail, and what a watcher of the run reads.

// event appends a run_events row for key's run.
func (s *core) event(ctx context.Context, key domain.RunKey, action, typ string, data any) error {
	return s.eventFull(ctx, RunEvent{Project: key.Project, Domain: key.Domain, RunName: key.Run,
		ActionName: strPtr(action), Type: typ}, data)
}

// taskEvent appends a run_events row about task t (and attempt, when not 0).
func (s *core) taskEvent(ctx context.Context, t Task, attemptID int64, typ string, data any) error {
	e := RunEvent{Project: t.Project, Domain: t.Domain, RunName: t.RunName, ActionName: &t.ActionName,
		TaskID: &t.ID, Type: typ}
	if attemptID != 0 {
		e.AttemptID = &attemptID
	}
	return s.eventFull(ctx, e, data)
}

// eventFull appends e with data as its JSON: in a transaction, to the rows
// InTx inserts before it commits; else at once.
func (s *core) eventFull(ctx context.Context, e RunEvent, data any) error {
	raw, err := encodeRows(data)
	if err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	e.Data = raw
	if s.tx == nil {
		// Outside a transaction: one of its own, which announces it.
		return s.inTx(ctx, func(tx *Store) error { return tx.eventFull(ctx, e, data) })
	}
	s.tx.events = append(s.tx.events, e)
	return nil
}

// eventsStatement returns the statement, not yet run, that inserts the
// transaction's buffered events in the order they were written, with
// their runs' feed locks and notifications (eventNotices) and those of the
// attempts they are about or whose output grew (attemptNotices): the locks
// are an InitPlan of the insert's WHERE, so Postgres takes them before the
// first row draws its id from the sequence. The root moves left by
// SetRootPhase are made by the same statement (rootMoveSQL). A transaction
// that wrote no event but grew output gets notifyAttemptsSQL alone. Nil
// when there is nothing to write or send. InTx's flushEvents runs it with
// the COMMIT.
func (s *core) eventsStatement(ctx context.Context) (*gorm.DB, error) {
	if s.tx == nil || len(s.tx.events) == 0 && len(s.tx.grown) == 0 {
		return nil, nil
	}
	attempts := attemptNotices(s.tx.events, s.tx.grown)
	s.tx.grown = nil
	if len(s.tx.events) == 0 {
		q := s.raw(ctx, notifyAttemptsSQL, map[string]any{"attempt_channel": AttemptLogsChannel,
			"attempts": Strings(attempts)})
		return q, q.Error
	}
	events, moves := s.tx.events, s.tx.roots
	s.tx.events, s.tx.roots = nil, nil
	now := time.Now().UTC()
	for i := range events {
		if events[i].CreatedAt.IsZero() {
			events[i].CreatedAt = now
		}
	}
	rows, err := encodeRows(events)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	scopes, notices, err := eventNotices(events)
	if err != nil {
		return nil, err
	}
	args := map[string]any{"rows": string(rows), "scopes": Strings(scopes), "channel": EventsChannel,
		"notices": Strings(notices), "attempt_channel": AttemptLogsChannel, "attempts": Strings(attempts)}
	text := insertEventsSQL
	if len(moves) > 0 {
		maps.Copy(args, rootMovesArgs(moves))
		text = rootMoveSQL(moves)
	}
	ins := s.raw(ctx, text, args)
	return ins, ins.Error
}

// insertEventsSQL inserts the events of @rows with their feed locks
// (@scopes) and notifications (@notices).
const insertEventsSQL = eventsInsert + `
  FROM jsonb_to_recordset(CAST(@rows AS jsonb)) AS e(` + eventsRecord + `)
 WHERE ` + eventsLocksAndNotices

// eventsInsert, eventsRecord and eventsLocksAndNotices are the parts of an
// insert of the transaction's events (@rows) that insertEventsSQL and
// rootMoveSQL share: the insert and what it selects from e, the columns of
// a record of @rows, and the feed locks and notifications (an InitPlan of
// the WHERE, taken before the first row draws its id), the notifications
// (of the runs on @channel, of the attempts on @attempt_channel) only while
// a listener is registered (listenersLive).
const (
	eventsInsert = `INSERT INTO run_events (project, domain, run_name, action_name, task_id, attempt_id, type, data, created_at)
SELECT e.project, e.domain, e.run_name, e.action_name, e.task_id, e.attempt_id, e.type,
       coalesce(e.data, 'null'), e.created_at`
	eventsRecord = `project text, domain text, run_name text, action_name text,
       task_id bigint, attempt_id bigint, type text, data jsonb, created_at timestamptz`
	eventsLocksAndNotices = `(SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0)))
        FROM unnest(CAST(CAST(@scopes AS text) AS text[])) AS k) >= 0
   AND (SELECT count(pg_notify(@channel, n)) FROM unnest(CAST(CAST(@notices AS text) AS text[])) AS n
         WHERE ` + listenersLive + `) >= 0
   AND (SELECT count(pg_notify(@attempt_channel, n)) FROM unnest(CAST(CAST(@attempts AS text) AS text[])) AS n
         WHERE ` + listenersLive + `) >= 0`
)

// notifyAttemptsSQL sends the notifications of @attempts on
// @attempt_channel, while a listener is registered (listenersLive): the
// end of a transaction that grew output and wrote no event.
const notifyAttemptsSQL = `SELECT count(pg_notify(@attempt_channel, n))
  FROM unnest(CAST(CAST(@attempts AS text) AS text[])) AS n WHERE ` + listenersLive

// outputGrew notes that attempt id's output grew: the commit of s's
// transaction notifies AttemptLogsChannel of it (eventsStatement); outside
// a transaction a statement of its own does at once.
func (s *core) outputGrew(ctx context.Context, id int64) error {
	if s.tx != nil {
		s.tx.grown = append(s.tx.grown, id)
		return nil
	}
	return mapErr(s.exec(ctx, notifyAttemptsSQL, map[string]any{"attempt_channel": AttemptLogsChannel,
		"attempts": Strings{strconv.FormatInt(id, 10)}}).Error)
}

// attemptNotices returns the payloads of AttemptLogsChannel for a
// transaction's events and the attempts whose output it grew: the id, in
// decimal, of each attempt an event is about or in grown, sorted and
// without repeats.
func attemptNotices(events []RunEvent, grown []int64) []string {
	ids := slices.Clone(grown)
	for _, e := range events {
		if e.AttemptID != nil {
			ids = append(ids, *e.AttemptID)
		}
	}
	slices.Sort(ids)
	out := make([]string, 0, len(ids))
	for _, id := range slices.Compact(ids) {
		out = append(out, strconv.FormatInt(id, 10))
	}
	return out
}

// listenersLive is true while some connection is registered in
// event_listeners (ListenEvents): NOTIFY takes one database-wide lock at
// commit, so that every notifying transaction commits one at a time, and
// nobody may be listening. Reading the table takes its ACCESS SHARE lock
// to the commit, which a registration waits for (registerListener).
const listenersLive = `EXISTS (SELECT 1 FROM event_listeners WHERE expires_at > now())`

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
