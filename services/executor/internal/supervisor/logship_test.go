package supervisor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/stretchr/testify/require"
)

// sinkFake records the batches it takes; fail, while set, answers each call
// with its error instead.
type sinkFake struct {
	mu      sync.Mutex
	batches [][]workerapi.LogChunk
	fail    error
	calls   chan struct{} // one send per call, whatever its outcome
}

func (f *sinkFake) AppendLogs(_ context.Context, _ int64, chunks []workerapi.LogChunk) error {
	defer func() { f.calls <- struct{}{} }()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.batches = append(f.batches, append([]workerapi.LogChunk(nil), chunks...))
	return nil
}

func (f *sinkFake) setFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

func (f *sinkFake) taken() [][]workerapi.LogChunk {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]workerapi.LogChunk(nil), f.batches...)
}

// newShipperFake returns a shipper on a manual tick and its sink.
func newShipperFake(t *testing.T) (*logShipper, *sinkFake, chan time.Time) {
	t.Helper()
	sink := &sinkFake{calls: make(chan struct{}, 1024)}
	tick := make(chan time.Time)
	s := startShipper(context.Background(), 1, sink, slog.New(slog.NewTextHandler(io.Discard, nil)), tick, func() {})
	t.Cleanup(s.close)
	return s, sink, tick
}

// awaitCall waits for the sink's next call.
func awaitCall(t *testing.T, sink *sinkFake) {
	t.Helper()
	select {
	case <-sink.calls:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the sink was not called within 10s")
	}
}

func chunk(stream workerapi.LogChunkStream, data string) workerapi.LogChunk {
	return workerapi.LogChunk{Stream: stream, Data: data}
}

func TestShipperShipsOnTheTick(t *testing.T) {
	t.Parallel()
	s, sink, tick := newShipperFake(t)
	s.write("stdout", []byte("a"))
	s.write("stdout", []byte("b\x00\xff"))
	s.write("stderr", []byte("c"))
	require.Empty(t, sink.taken(), "nothing ships before the tick or a full batch")
	tick <- time.Now()
	awaitCall(t, sink)
	require.Equal(t, [][]workerapi.LogChunk{{chunk(workerapi.Stdout, "ab\uFFFD"), chunk(workerapi.Stderr, "c")}}, sink.taken(),
		"one batch; writes of one stream coalesce; NUL removed, invalid UTF-8 replaced")
	tick <- time.Now() // nothing pending: no call
	s.close()
	require.Len(t, sink.taken(), 1)
}

func TestShipperShipsAFullBatchAtOnce(t *testing.T) {
	t.Parallel()
	s, sink, _ := newShipperFake(t)
	half := strings.Repeat("x", shipBatchBytes/2)
	s.write("stdout", []byte(half))
	s.write("stdout", []byte(half))
	s.write("stdout", []byte("y"))
	awaitCall(t, sink)
	got := sink.taken()
	require.Len(t, got, 1)
	require.Equal(t, []workerapi.LogChunk{chunk(workerapi.Stdout, half+half)}, got[0], "64 KiB ship without a tick, no more")
	s.close()
	require.Equal(t, []workerapi.LogChunk{chunk(workerapi.Stdout, "y")}, sink.taken()[1], "close flushes the rest")
}

func TestShipperCloseFlushesACutRune(t *testing.T) {
	t.Parallel()
	s, sink, _ := newShipperFake(t)
	s.write("stdout", []byte("caf\xc3"))
	s.write("stdout", []byte("\xa9 "))
	s.write("stderr", []byte("\xe2\x82"))
	s.close()
	s.write("stdout", []byte("late"))
	require.Equal(t, [][]workerapi.LogChunk{{chunk(workerapi.Stdout, "café "), chunk(workerapi.Stderr, "\uFFFD")}}, sink.taken(),
		"a rune split across writes is joined; one cut by the end becomes U+FFFD; writes after close are ignored")
}

func TestShipperRetriesAFailedBatchInOrder(t *testing.T) {
	t.Parallel()
	s, sink, tick := newShipperFake(t)
	sink.setFail(errors.New("api down"))
	s.write("stdout", []byte("one\n"))
	tick <- time.Now()
	awaitCall(t, sink)
	sink.setFail(nil)
	s.write("stdout", []byte("two\n"))
	tick <- time.Now()
	awaitCall(t, sink)
	require.Equal(t, [][]workerapi.LogChunk{{chunk(workerapi.Stdout, "one\ntwo\n")}}, sink.taken())
}

func TestShipperDropsARejectedBatch(t *testing.T) {
	t.Parallel()
	s, sink, tick := newShipperFake(t)
	sink.setFail(ErrLogsRejected)
	s.write("stdout", []byte("one\n"))
	tick <- time.Now()
	awaitCall(t, sink)
	sink.setFail(nil)
	s.write("stdout", []byte("two\n"))
	s.close()
	require.Equal(t, [][]workerapi.LogChunk{{chunk(workerapi.Stdout, "two\n")}}, sink.taken())
}

func TestShipperBoundsWhatWaitsAndMarksTheLoss(t *testing.T) {
	t.Parallel()
	s, sink, tick := newShipperFake(t)
	sink.setFail(errors.New("api down"))
	piece := strings.Repeat("z", 32<<10)
	// Two pieces past the bound even while a batch is out (taken, tried,
	// not yet put back): what is out does not count against the bound.
	for range (shipPendingBytes+shipBatchBytes)/len(piece) + 2 {
		s.write("stdout", []byte(piece))
	}
	awaitCall(t, sink) // a full batch tried and put back
	require.LessOrEqual(t, s.pendingBytes(), int64(shipPendingBytes+len(piece)+2*32<<10))
	sink.setFail(nil)
	tick <- time.Now()
	for len(sink.taken()) == 0 {
		awaitCall(t, sink)
	}
	first := sink.taken()[0]
	require.Equal(t, workerapi.Stderr, first[0].Stream)
	require.Contains(t, first[0].Data, "bytes of output lost")
	s.close()
	var shipped int
	for _, b := range sink.taken() {
		for _, c := range b {
			if c.Stream == workerapi.Stdout {
				shipped += len(c.Data)
			}
		}
	}
	require.LessOrEqual(t, shipped, shipPendingBytes+shipBatchBytes, "at most the bound (and a batch in flight) is kept")
}

func TestNilShipperShipsNothing(t *testing.T) {
	t.Parallel()
	var s *logShipper
	s.write("stdout", []byte("x"))
	s.close()
}
