package runner

// tail is an io.Writer that keeps the last limit bytes written to it and
// counts everything. It is written by one goroutine and read after that
// goroutine is done, so it needs no lock.
type tail struct {
	limit int
	buf   []byte // ring of cap limit once full
	start int    // index of the oldest byte once the ring is full
	total int64  // bytes written in all

	// on, when set, sees every write (see Spec.OnOutput).
	on func(p []byte)
}

func newTail(limit int) *tail { return &tail{limit: max(limit, 0)} }

// Write keeps the last limit bytes of p appended to what was kept; it never
// fails.
func (t *tail) Write(p []byte) (int, error) {
	n := len(p)
	t.total += int64(n)
	if t.on != nil {
		t.on(p)
	}
	if t.limit == 0 {
		return n, nil
	}
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		t.start = 0
		return n, nil
	}
	if room := t.limit - len(t.buf); room > 0 {
		k := min(room, len(p))
		t.buf = append(t.buf, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 { // the ring is full: overwrite the oldest bytes
		k := copy(t.buf[t.start:], p)
		p = p[k:]
		t.start = (t.start + k) % t.limit
	}
	return n, nil
}

// Bytes returns the kept bytes, oldest first.
func (t *tail) Bytes() []byte {
	out := make([]byte, 0, len(t.buf))
	out = append(out, t.buf[t.start:]...)
	return append(out, t.buf[:t.start]...)
}

// Truncated reports whether more was written than was kept.
func (t *tail) Truncated() bool { return t.total > int64(len(t.buf)) }
