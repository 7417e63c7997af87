package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/capstan-run/capstan/pkg/workerapi"
)

// LogSink takes the output of attempts while they run. When the Reporter
// given to New is also a LogSink, every attempt's stdout and stderr are
// shipped through it as they are written, not only in the final report.
type LogSink interface {
	// AppendLogs stores chunks of attempt id's output, in order, in one
	// call. An error wrapping ErrLogsRejected is final (the attempt is gone,
	// the chunks are invalid); any other may pass on a retry.
	AppendLogs(ctx context.Context, id int64, chunks []workerapi.LogChunk) error
}

// ErrLogsRejected: the control plane refused log chunks; retrying will not
// help.
var ErrLogsRejected = errors.New("log chunks rejected")

// How output is shipped, per attempt.
const (
	// shipInterval: pending output is shipped at most this often, unless a
	// full batch is ready first.
	shipInterval = time.Second
	// shipBatchBytes: a batch is shipped as soon as this much is pending,
	// and no batch is larger (but for one larger write).
	shipBatchBytes = 64 << 10
	// shipPendingBytes bounds the output held while the api does not take
	// it; past it the oldest is dropped (and a marker says so).
	shipPendingBytes = 1 << 20
	// shipFlushTimeout bounds the final flush, before the final report.
	shipFlushTimeout = 10 * time.Second
)

// logShipper batches one attempt's output and ships it through a LogSink
// from its own goroutine: write never blocks the process, a failed batch is
// retried at the next tick, and an api outage costs output (logged, and
// marked in the stream), never the attempt. A nil *logShipper ships nothing.
type logShipper struct {
	id   int64
	sink LogSink
	log  *slog.Logger
	ctx  context.Context // bounds every call to sink
	tick <-chan time.Time
	stop func() // stops tick

	full    chan struct{} // cap 1: a batch is ready
	closing chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	pending []workerapi.LogChunk
	size    int               // bytes of text in pending
	lost    int64             // bytes dropped since the last batch taken
	carry   map[string][]byte // per stream, a rune cut by the end of a write
	closed  bool
}

// newLogShipper ships attempt id's output through the Reporter when it is a
// LogSink, every shipInterval; nil (nothing shipped) otherwise.
func (s *Supervisor) newLogShipper(id int64) *logShipper {
	sink, ok := s.rep.(LogSink)
	if !ok {
		return nil
	}
	t := time.NewTicker(shipInterval)
	return startShipper(s.ctx, id, sink, s.log, t.C, t.Stop)
}

// startShipper starts a shipper that ships on each tick and on a full
// batch; stop is called once it is closed.
func startShipper(ctx context.Context, id int64, sink LogSink, log *slog.Logger, tick <-chan time.Time, stop func()) *logShipper {
	s := &logShipper{id: id, sink: sink, log: log.With("attempt_id", id), ctx: ctx, tick: tick, stop: stop,
		full: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{}),
		carry: map[string][]byte{}}
	go s.loop()
	return s
}

// write queues output p of stream ("stdout" or "stderr") as text; it is
// runner.Spec.OnOutput and never blocks on the api.
func (s *logShipper) write(stream string, p []byte) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	b := append(s.carry[stream], p...)
	cut := completeRunes(b)
	s.carry[stream] = append([]byte(nil), b[cut:]...)
	s.add(stream, logText(b[:cut], false))
}

// completeRunes returns the length of b without a trailing incomplete rune.
func completeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

// add queues text (with s.mu held), appending to the last chunk of the same
// stream while the batch bound allows, drops the oldest output past
// shipPendingBytes and signals a full batch.
func (s *logShipper) add(stream, text string) {
	if text == "" {
		return
	}
	if n := len(s.pending); n > 0 && string(s.pending[n-1].Stream) == stream &&
		len(s.pending[n-1].Data)+len(text) <= shipBatchBytes {
		s.pending[n-1].Data += text
	} else {
		s.pending = append(s.pending, workerapi.LogChunk{Stream: workerapi.LogChunkStream(stream), Data: text})
	}
	s.size += len(text)
	for s.size > shipPendingBytes && len(s.pending) > 1 {
		if s.lost == 0 {
			s.log.Warn("live output dropped: the control plane does not take it", "bytes", len(s.pending[0].Data))
		}
		s.size -= len(s.pending[0].Data)
		s.lost += int64(len(s.pending[0].Data))
		s.pending = s.pending[1:]
	}
	if s.size >= shipBatchBytes {
		select {
		case s.full <- struct{}{}:
		default:
		}
	}
}

// take removes and returns the next batch, at most shipBatchBytes but for a
// larger single chunk, behind a marker when output was dropped.
func (s *logShipper) take() []workerapi.LogChunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	var batch []workerapi.LogChunk
	if s.lost > 0 {
		batch = append(batch, workerapi.LogChunk{Stream: workerapi.Stderr, Data: lossMarker(s.lost)})
		s.lost = 0
	}
	n, size := 0, 0
	for n < len(s.pending) && (n == 0 || size+len(s.pending[n].Data) <= shipBatchBytes) {
		size += len(s.pending[n].Data)
		n++
	}
	batch = append(batch, s.pending[:n]...)
	s.pending, s.size = s.pending[n:], s.size-size
	return batch
}

// lossMarker is the line that stands in the stream for lost bytes of
// output.
func lossMarker(lost int64) string {
	return "[capstan: " + strconv.FormatInt(lost, 10) + " bytes of output lost: the control plane did not take them]\n"
}

// putBack returns a batch that failed to the front of what is pending.
func (s *logShipper) putBack(batch []workerapi.LogChunk) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range batch {
		s.size += len(c.Data)
	}
	s.pending = append(batch, s.pending...)
}
