package plugin

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// shippedAs is what the supervisor ships of b (its logText).
func shippedAs(b string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(b, "\uFFFD"), "\x00", "")
}

// TestKubernetesShippedPrefix: the skip counts bytes as shipped, so the
// rest of a log past a skip of the shipped length of its start is the
// rest of the log.
func TestKubernetesShippedPrefix(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, start, rest string }{
		{"plain", "one\ntwo\n", "three\n"},
		{"multibyte runes", "é€😀\n", "ß\n"},
		{"an invalid run is one U+FFFD", "a\xff\xfe\xfdb\n", "c\n"},
		{"NUL is dropped", "a\x00\x00b\n", "c\n"},
		{"a real U+FFFD", "\uFFFD\xff\n", "d\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := []byte(c.start + c.rest)
			cut, left := shippedPrefix(b, int64(len(shippedAs(c.start))))
			require.Zero(t, left)
			require.Equal(t, c.rest, string(b[cut:]))
		})
	}
	cut, left := shippedPrefix([]byte("ab\xe2\x82"), 5)
	require.Equal(t, 2, cut, "a rune the read cuts waits for the next")
	require.Equal(t, int64(3), left)
}

// TestKubernetesLogSkipAcrossReads: the skip carries a cut rune over to
// the next write and hands on only what follows it.
func TestKubernetesLogSkipAcrossReads(t *testing.T) {
	t.Parallel()
	var got []byte
	l := newPodLogs(1<<10, int64(len("€x\n")), func(_ string, p []byte) { got = append(got, p...) })
	for _, p := range []string{"\xe2\x82", "\xacx", "\nrest\n"} {
		l.write([]byte(p))
	}
	require.Equal(t, "rest\n", string(got))
	require.Equal(t, "€x\nrest\n", string(l.buf), "the whole log kept")
}
