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
)

// A logs?follow=true stream polls Postgres rather than waiting on
// LISTEN/NOTIFY: a poll is one index range scan (attempt, seq > last) per
// follower, executors ship at most once a second so a 250 ms poll adds
// little delay, and polling needs no connection held outside the pool nor a
// fan-out of notifications, and misses nothing across reconnects.
const (
	// logPollInterval is how often a stream looks for new chunks.
	logPollInterval = 250 * time.Millisecond
	// logHeartbeat is how long a stream may stay silent: then it writes a
	// comment line, so proxies keep it open and a gone client is noticed.
	logHeartbeat = 15 * time.Second
	// logWriteTimeout bounds one write to a client that stopped reading.
	logWriteTimeout = 30 * time.Second
	// logPage is how many chunks a poll reads at most.
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
	log     *slog.Logger
	attempt int64
	after   int64
	maxFor  time.Duration
	// timestamps starts each event's text with its chunk's time (logTime).
	timestamps bool
	// stopping ends the stream when the api shuts down.
	stopping <-chan struct{}
}

var _ api.GetAttemptLogsResponseObject = (*logStream)(nil)

func (h *Handlers) newLogStream(ctx context.Context, attempt int64, timestamps bool) *logStream {
	return &logStream{ctx: ctx, store: h.store, log: h.log, attempt: attempt, after: lastEventID(ctx),
		maxFor: h.cfg.LogFollowMax, timestamps: timestamps, stopping: h.stopping}
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

// follow polls for chunks and sends them until the attempt ended and all
// were sent (then `end`), the context ends or maxFor passed.
func (s *logStream) follow(send func(string) error) error {
	poll := time.NewTicker(logPollInterval)
	defer poll.Stop()
	deadline := time.NewTimer(s.maxFor)
	defer deadline.Stop()
	if err := send(": following attempt logs\n\n"); err != nil {
		return err
	}
	silent := time.Now()
	for {
		// The state first: an executor ships its last chunks before its
		// final report, so once the attempt ended every chunk is stored.
		a, err := s.store.Attempts().GetAttempt(s.ctx, s.attempt)
		if err != nil {
			return fmt.Errorf("read attempt: %w", err)
		}
		n, err := s.sendChunks(send)
		if err != nil {
			return err
		}
		switch {
		case n == logPage:
			continue // more to read at once
		case a.State.IsTerminal():
			return s.end(send, a.State.String())
		case n > 0:
			silent = time.Now()
		case time.Since(silent) >= logHeartbeat:
			if err := send(": heartbeat\n\n"); err != nil {
				return err
			}
			silent = time.Now()
		}
		select {
		case <-s.ctx.Done():
			return nil
		case <-deadline.C:
			return nil
		case <-s.stopping:
			return nil
		case <-poll.C:
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
