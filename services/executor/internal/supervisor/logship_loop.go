package supervisor

import (
	"context"
	"errors"
	"time"
)

// loop ships a batch on each tick and on a full batch, and everything once
// closing.
func (s *logShipper) loop() {
	defer close(s.done)
	defer s.stop()
	for {
		select {
		case <-s.tick:
		case <-s.full:
			if !s.batchFull() {
				continue // a signal for a batch an earlier wake already shipped
			}
		case <-s.closing:
			s.flush()
			return
		}
		_ = s.shipOnce(s.ctx)
	}
}

// shipOnce ships the next batch. A rejected batch is dropped (logged); any
// other failure puts it back for the next try. It returns the sink's error.
func (s *logShipper) shipOnce(ctx context.Context) error {
	batch := s.take()
	if len(batch) == 0 {
		return nil
	}
	err := s.sink.AppendLogs(ctx, s.id, batch)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrLogsRejected):
		s.log.Warn("live output rejected; dropped", "chunks", len(batch), "err", err)
	default:
		s.log.Debug("shipping live output failed; retrying", "err", err)
		s.putBack(batch)
	}
	return err
}

// flush ships what is pending, retrying for at most shipFlushTimeout; what
// is left then is dropped and logged.
func (s *logShipper) flush() {
	ctx, cancel := context.WithTimeout(s.ctx, shipFlushTimeout)
	defer cancel()
	delay := 100 * time.Millisecond
	for s.pendingBytes() > 0 {
		if err := s.shipOnce(ctx); err == nil || errors.Is(err, ErrLogsRejected) {
			continue
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			s.log.Warn("live output lost: the final flush failed", "bytes", s.pendingBytes())
			return
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// batchFull reports whether a whole batch is pending.
func (s *logShipper) batchFull() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size >= shipBatchBytes
}

// pendingBytes is how much output waits to be shipped, a marker included.
func (s *logShipper) pendingBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost > 0 {
		return int64(s.size + len(lossMarker(s.lost)))
	}
	return int64(s.size)
}

// close ships what is pending, a rune cut at the end included (as U+FFFD),
// and returns once it is stored or given up; later writes are ignored.
// Call it before the final report.
func (s *logShipper) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for _, stream := range []string{"stdout", "stderr"} {
		s.add(stream, logText(s.carry[stream], false))
	}
	s.mu.Unlock()
	close(s.closing)
	<-s.done
}
