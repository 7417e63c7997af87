package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The run_events feed: watchers read rows by id after the last they saw and
// wait for a NOTIFY on EventsChannel between reads.
//
// Ids come from a sequence, drawn when a row is inserted, and concurrent
// transactions could commit them out of order: a watcher that read id 11
// before id 10 committed would never see 10. So a transaction takes a
// transaction-scoped advisory lock per run (in key order, one statement)
// before it inserts run_events rows, and holds it to its commit: within a
// run the ids commit in order, and a run's stream reading "id > last" never
// skips a row. The insert is a transaction's last statement, so the lock is
// the last one it takes (docs/design-notes.md, "Lock order") and is held
// only through the insert and the commit. A lock per project/domain would
// also order the project's stream, but it made every event-writing
// transaction of a project commit one at a time; a project's stream may therefore miss a row that commits after a later
// id of another run, and is a signal to re-read state, not a ledger.

// beforeCommit returns what a test runs in InTx between the insert of the
// events and the commit, which are then sent one after the other rather
// than together; nil outside tests.
var beforeCommit = func(context.Context) func() { return nil }

// EventsChannel is the Postgres NOTIFY channel of new run_events rows. Each
// transaction that inserts rows sends, at its commit, one notification per
// run it wrote about, its payload the JSON EventNotice of the run.
const EventsChannel = "capstan_run_events"

// AttemptLogsChannel is the Postgres NOTIFY channel of attempts whose
// followed output changed: each transaction that appends log chunks of an
// attempt (AppendLogChunks) or writes a run_events row about one (its
// state changed) sends, at its commit, one notification per such attempt,
// its payload the attempt's id in decimal; like EventsChannel's, only
// while a listener is registered.
const AttemptLogsChannel = "capstan_attempt_logs"

// EventNotice is the payload of a notification on EventsChannel: the run
// whose run_events grew.
type EventNotice struct {
	Project string `json:"p"`
	Domain  string `json:"d"`
	Run     string `json:"r"`
}

// EventFilter selects the run_events rows of one project/domain and, when
// Run is not "", of one run of it.
type EventFilter struct {
	Project, Domain, Run string
}

// EventsAfter returns f's rows with id > after, in id order, at most limit
// (1..1000).
func (s Events) EventsAfter(ctx context.Context, f EventFilter, after int64, limit int) ([]RunEvent, error) {
	q := s.q(ctx).Where("project = ? AND domain = ? AND id > ?", f.Project, f.Domain, after)
	if f.Run != "" {
		q = q.Where("run_name = ?", f.Run)
	} else {
		q = q.Where(sqlListedByID)
	}
	var rows []RunEvent
	err := q.Order("id").Limit(min(max(limit, 1), 1000)).Find(&rows).Error
	return rows, mapErr(err)
}

// NewestEventID is the id of the newest run_events row of any run (0 when
// there is none): a stream that starts after it sends what commits from
// now on, less a row whose id was drawn before and commits after (see
// above). It reads the primary key's index alone.
func (s Events) NewestEventID(ctx context.Context) (int64, error) {
	var id int64
	err := s.raw(ctx, `SELECT coalesce(max(id), 0) FROM run_events`).Scan(&id).Error
	return id, mapErr(err)
}

// RunEventsAfter returns the phase of key's run, whether a restart of it is
// pending (the run ended but will run again), and its rows with id > after,
// in id order, at most limit (1..1000), read in one statement: when the
// phase is terminal, the rows hold the event its change wrote (if it was
// after `after`). Errors: ErrNotFound.
func (s Events) RunEventsAfter(ctx context.Context, key domain.RunKey, after int64, limit int) (domain.Phase, bool, []RunEvent, error) {
	var row struct {
		Phase      *string
		Restarting bool
		Events     []byte
	}
	err := s.raw(ctx, `SELECT (SELECT phase FROM runs WHERE project = @p AND domain = @d AND name = @r) AS phase,
		coalesce((SELECT restart_requested_at IS NOT NULL FROM runs WHERE project = @p AND domain = @d AND name = @r), false) AS restarting,
		(SELECT coalesce(json_agg(e ORDER BY e.id), '[]') FROM (SELECT * FROM run_events
		  WHERE project = @p AND domain = @d AND run_name = @r AND id > @after ORDER BY id LIMIT @limit) e) AS events`,
		map[string]any{"p": key.Project, "d": key.Domain, "r": key.Run, "after": after,
			"limit": min(max(limit, 1), 1000)}).Scan(&row).Error
	if err != nil {
		return "", false, nil, mapErr(err)
	}
	if row.Phase == nil {
		return "", false, nil, ErrNotFound
	}
	var events []RunEvent
	if err := decodeRows(row.Events, &events); err != nil {
		return "", false, nil, fmt.Errorf("decode run_events: %w", err)
	}
	return domain.Phase(*row.Phase), row.Restarting, events, nil
}

// RunPhase returns the phase of key's run. Errors: ErrNotFound.
func (s Runs) RunPhase(ctx context.Context, key domain.RunKey) (domain.Phase, error) {
	var phase string
	err := s.q(ctx).Model(&Run{}).Select("phase").
		Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Run).Take(&phase).Error
	return domain.Phase(phase), mapErr(err)
}

// eventNotices returns the per-run feed lock keys of events, sorted and
// without repeats (the order flushEvents locks them in), and the
// notifications to queue for the commit, one EventNotice per run.
func eventNotices(events []RunEvent) (scopes, notices []string, err error) {
	for _, e := range events {
		scopes = append(scopes, "run_events:"+e.Project+"/"+e.Domain+"/"+e.RunName)
		n, err := encodeRows(EventNotice{Project: e.Project, Domain: e.Domain, Run: e.RunName})
		if err != nil {
			return nil, nil, err
		}
		notices = append(notices, string(n))
	}
	slices.Sort(scopes)
	slices.Sort(notices)
	return slices.Compact(scopes), slices.Compact(notices), nil
}

// ListenerApplicationName is the application_name of ListenFeed's
// connections (pg_stat_activity).
const ListenerApplicationName = "capstan-event-listener"

// listenerTTL is how long a listener's registration in event_listeners
// lasts; the listener renews it every listenerTTL/4. A listener that dies
// without removing it leaves writers notifying until it expires. Tests
// shrink it.
var listenerTTL = time.Minute

// FeedHandlers are what ListenFeed calls: Connected each time the LISTEN
// and the registration are in place (first and after every reconnection;
// notifications sent while it was away are lost, so the caller re-reads
// then), Lost with the error when the connection failed or its
// registration lapsed, Event for each notification on EventsChannel and
// Attempt, with the attempt's id, for each on AttemptLogsChannel. Attempt
// nil: the connection does not LISTEN on AttemptLogsChannel.
type FeedHandlers struct {
	Connected func()
	Lost      func(error)
	Event     func(EventNotice)
	Attempt   func(id int64)
}

// ListenEvents is ListenFeed without AttemptLogsChannel.
func ListenEvents(ctx context.Context, dsn string, retry time.Duration, connected func(), lost func(error),
	notice func(EventNotice)) error {
	return ListenFeed(ctx, dsn, retry, FeedHandlers{Connected: connected, Lost: lost, Event: notice})
}

// ListenFeed holds one connection to dsn LISTENing on EventsChannel (and
// AttemptLogsChannel) until ctx ends: it registers the connection in
// event_listeners (writers notify only while a registration is live, see
// listenersLive) and renews it, and calls h's handlers (FeedHandlers).
// When the connection fails, or its registration lapsed, it calls h.Lost
// and dials again after retry (at least 10 ms). It returns ctx's error.
func ListenFeed(ctx context.Context, dsn string, retry time.Duration, h FeedHandlers) error {
	retry = max(retry, 10*time.Millisecond)
	for {
		err := listenOnce(ctx, dsn, h)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h.Lost(err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
	}
}

// listenOnce LISTENs on one connection, registered, until it fails or ctx
// ends, and removes its registration then when it can.
func listenOnce(ctx context.Context, dsn string, h FeedHandlers) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["application_name"] = ListenerApplicationName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	channels := []string{EventsChannel}
	if h.Attempt != nil {
		channels = append(channels, AttemptLogsChannel)
	}
	for _, ch := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	id := uuid.New()
	if err := registerListener(ctx, conn, id); err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = conn.Exec(dctx, `DELETE FROM event_listeners WHERE id = $1`, id)
	}()
	h.Connected()
	renewAt := time.Now().Add(listenerTTL / 4)
	for {
		wctx, cancel := context.WithDeadline(ctx, renewAt)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && time.Now().Before(renewAt):
			return err
		case err != nil:
			if err := renewListener(ctx, conn, id); err != nil {
				return err
			}
			renewAt = time.Now().Add(listenerTTL / 4)
			continue
		}
		if err := dispatch(n, h); err != nil {
			return err
		}
	}
}

// dispatch hands notification n to its channel's handler. Errors: a
// payload that does not decode.
func dispatch(n *pgconn.Notification, h FeedHandlers) error {
	if n.Channel == AttemptLogsChannel {
		id, err := strconv.ParseInt(n.Payload, 10, 64)
		if err != nil {
			return fmt.Errorf("attempt notice %q: %w", n.Payload, err)
		}
		h.Attempt(id)
		return nil
	}
	var en EventNotice
	if err := json.Unmarshal([]byte(n.Payload), &en); err != nil {
		return errors.Join(fmt.Errorf("event notice %q", n.Payload), err)
	}
	h.Event(en)
	return nil
}

// registerListener inserts id's registration (and deletes the expired
// ones) under the table's ACCESS EXCLUSIVE lock. Every writer's check
// (listenersLive) holds the table's ACCESS SHARE lock to its commit, so the
// lock waits until each writer that checked without the registration has
// committed, and a writer checking meanwhile waits for the registration's
// commit, then reads with a snapshot that holds it: once the registration
// committed, a re-read finds every write that did not notify. A writer
// stuck that long fails the registration after 5 s (lock_timeout) rather
// than holding every writer behind it.
func registerListener(ctx context.Context, conn *pgx.Conn, id uuid.UUID) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, q := range []string{`SET LOCAL lock_timeout = '5s'`, `LOCK TABLE event_listeners IN ACCESS EXCLUSIVE MODE`,
			`DELETE FROM event_listeners WHERE expires_at <= now()`} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("register the event listener: %w", err)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO event_listeners (id, expires_at) VALUES ($1, now() + $2 * interval '1 millisecond')`,
			id, listenerTTL.Milliseconds())
		return err
	})
}

// renewListener extends id's registration by listenerTTL. A registration
// that is gone (it lapsed and another listener deleted it) is an error:
// writes may have gone without a notification meanwhile.
func renewListener(ctx context.Context, conn *pgx.Conn, id uuid.UUID) error {
	tag, err := conn.Exec(ctx, `UPDATE event_listeners SET expires_at = now() + $2 * interval '1 millisecond'
		WHERE id = $1 AND expires_at > now()`, id, listenerTTL.Milliseconds())
	if err == nil && tag.RowsAffected() == 0 {
		err = errors.New("the event listener's registration lapsed")
	}
	return err
}
