package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/services/api/internal/feed"
)

// A logs?follow=true stream waits on the api's one LISTEN connection
// (feed.Hub.WatchAttempt): the commit of chunks of its attempt, or of an
// event about it (its state changed), wakes it to read what is new. The
// hub wakes every watcher when it (re)connects, so nothing committed while
// it was away is missed; Config.LogPollInterval (5 s) re-reads anyway, a
// fallback for a hub that cannot listen, never the way output arrives.
const (
	// logHeartbeat is how long a stream may stay silent: then it writes a
	// comment line, so proxies keep it open and a gone client is noticed.
	logHeartbeat = 15 * time.Second
	// logWriteTimeout bounds one write to a client that stopped reading.
	logWriteTimeout = 30 * time.Second
	// logPage is how many chunks a read takes at most.
	logPage = 256
)

// logStream is GetAttemptLogs' answer with follow=true: server-sent
// events, one per chunk after the request's Last-Event-ID (`id:` the chunk's
// seq, `event:` stdout or stderr, a `data:` line per line of its text; a
// carriage return is sent as a line break; with timestamps the text starts
// with the time the chunk was stored and a space), then `event: end` with the
// attempt's final state as data once the attempt ended and every chunk was
// sent. It stops early when the client goes away, after LogFollowMax or
// when the api shuts down; the client then resumes with Last-Event-ID.
type logStream struct {
	ctx     context.Context
	store   *store.Store
	hub     *feed.Hub
	log     *slog.Logger
	attempt int64
	after   int64
	maxFor  time.Duration
	// timestamps starts each event's text with its chunk's time (logTime).
	timestamps bool
	// poll is the fallback re-read's period (Config.LogPollInterval).
	poll time.Duration
	// stopping ends the stream when the api shuts down.
	stopping <-chan struct{}
}

var _ api.GetAttemptLogsResponseObject = (*logStream)(nil)

func (h *Handlers) newLogStream(ctx context.Context, attempt int64, timestamps bool) *logStream {
	return &logStream{ctx: ctx, store: h.store, hub: h.feed, log: h.log, attempt: attempt, after: lastEventID(ctx),
		maxFor: h.cfg.LogFollowMax, poll: h.cfg.LogPollInterval, timestamps: timestamps, stopping: h.stopping}
}

// VisitGetAttemptLogsResponse writes the stream; it returns nil once the
// stream ended, however it ended (the response is committed by then).
func (s *logStream) VisitGetAttemptLogsResponse(w http.ResponseWriter) error {
	send, done := startEventStream(w)
	defer done()
	if err := s.follow(send); err != nil && s.ctx.Err() == nil {
		s.log.Warn("log stream ended", "attempt_id", s.attempt, "err", err)
	}
	return nil
}

// startEventStream commits w as a text/event-stream response and returns
// send, which writes text and flushes it (failing when the client does not
// take it within logWriteTimeout), and done, to call when the stream ends.
func startEventStream(w http.ResponseWriter) (send func(text string) error, done func()) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send = func(text string) error {
		if err := rc.SetWriteDeadline(time.Now().Add(logWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if _, err := io.WriteString(w, text); err != nil {
			return err
		}
		return rc.Flush()
	}
	// The connection may serve further requests: leave it no deadline.
	return send, func() { _ = rc.SetWriteDeadline(time.Time{}) }
}

// follow sends the chunks, then waits for the hub's signal (or the
// fallback poll) and sends the new ones, until the attempt ended and all
// were sent (then `end`), the context ends, maxFor passed or the api
// stops. It subscribes before its first read: a commit between the two is
// then signalled.
func (s *logStream) follow(send func(string) error) error {
	watcher := s.hub.WatchAttempt(s.attempt)
	defer s.hub.Stop(watcher)
	poll := time.NewTicker(s.poll)
	defer poll.Stop()
	keepAlive := time.NewTicker(logHeartbeat)
	defer keepAlive.Stop()
	deadline := time.NewTimer(s.maxFor)
	defer deadline.Stop()
	if err := send(": following attempt logs\n\n"); err != nil {
		return err
	}
	for {
		// The state first: an executor ships its last chunks before its
		// final report, so once the attempt ended every chunk is stored.
		a, err := s.store.Attempts().GetAttempt(s.ctx, s.attempt)
		if err != nil {
			return fmt.Errorf("read attempt: %w", err)
		}
		n, err := s.sendChunks(send)
		switch {
		case err != nil:
			return err
		case n == logPage:
			continue // more to read at once
		case a.State.IsTerminal():
			return s.end(send, a.State.String())
		case n > 0:
			keepAlive.Reset(logHeartbeat)
		}
		select {
		case <-watcher.C:
		case <-poll.C:
		case <-keepAlive.C:
			if err := send(": heartbeat\n\n"); err != nil {
				return err
			}
		case <-s.ctx.Done():
			return nil
		case <-deadline.C:
			return nil
		case <-s.stopping:
			return nil
		}
	}
}

// end sends `end` with the attempt's final state; an attempt that shipped
// no chunk at all (its executor could not) first has its final report's
// output sent, as events without id.
func (s *logStream) end(send func(string) error, state string) error {
	if s.after == 0 {
		l, err := s.store.Logs().FinalAttemptLog(s.ctx, s.attempt)
		if err != nil {
			return fmt.Errorf("read final logs: %w", err)
		}
		var b strings.Builder
		for _, c := range []store.LogChunk{{Stream: "stdout", Data: l.Stdout, CreatedAt: l.CreatedAt},
			{Stream: "stderr", Data: l.Stderr, CreatedAt: l.CreatedAt}} {
			if c.Data != "" {
				writeEvent(&b, c, s.timestamps)
			}
		}
		if err := send(b.String()); err != nil {
			return err
		}
	}
	return send("event: end\ndata: " + state + "\n\n")
}

// sendChunks sends the chunks after s.after, one page, and moves s.after;
// it returns how many it sent.
func (s *logStream) sendChunks(send func(string) error) (int, error) {
	chunks, err := s.store.Logs().LogChunksAfter(s.ctx, s.attempt, s.after, logPage)
	if err != nil {
		return 0, fmt.Errorf("read chunks: %w", err)
	}
	if len(chunks) == 0 {
		return 0, nil
	}
	var b strings.Builder
	for _, c := range chunks {
		writeEvent(&b, c, s.timestamps)
		s.after = c.Seq
	}
	return len(chunks), send(b.String())
}

// crlf turns CR LF and a lone CR into LF: a server-sent event's data
// cannot hold a CR.
var crlf = strings.NewReplacer("\r\n", "\n", "\r", "\n")

// logTime is the form of a chunk's time in a stream with timestamps:
// RFC 3339 in UTC with nanoseconds, fixed width.
const logTime = "2006-01-02T15:04:05.000000000Z"

// writeEvent writes chunk c as one server-sent event (without id when its
// seq is 0), its text after its time and a space when stamp is set.
func writeEvent(b *strings.Builder, c store.LogChunk, stamp bool) {
	if c.Seq > 0 {
		fmt.Fprintf(b, "id: %d\n", c.Seq)
	}
	fmt.Fprintf(b, "event: %s\n", c.Stream)
	text := chunkText(c)
	if stamp {
		text = c.CreatedAt.UTC().Format(logTime) + " " + text
	}
	for line := range strings.SplitSeq(crlf.Replace(text), "\n") {
		b.WriteString("data: ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
}
