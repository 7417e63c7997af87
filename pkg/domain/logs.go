package domain

// DefaultLogMaxBytes is the default bound of the output stored per attempt
// while it runs: 10 MiB.
const DefaultLogMaxBytes = 10 << 20

// LogCut returns the byte offset in an attempt's output (both streams in
// shipping order) before which stored chunks are dropped once total bytes
// were shipped and at most maxBytes may be kept: total - maxBytes, or 0 when
// everything fits. A chunk that starts before the cut is dropped whole, so
// what is kept never exceeds maxBytes (a marker stands for what went).
func LogCut(total, maxBytes int64) int64 {
	return max(total-maxBytes, 0)
}
