package runner

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTailKeepsLastBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		limit     int
		writes    []string
		want      string
		truncated bool
	}{
		{"empty", 4, nil, "", false},
		{"under limit", 4, []string{"ab", "c"}, "abc", false},
		{"exactly limit", 4, []string{"ab", "cd"}, "abcd", false},
		{"wraps", 4, []string{"abc", "def"}, "cdef", true},
		{"wraps many times", 4, []string{"ab", "cd", "ef", "g", "hij"}, "ghij", true},
		{"one big write", 4, []string{"a", "bcdefgh"}, "efgh", true},
		{"big write then small", 4, []string{"abcdefgh", "ij"}, "ghij", true},
		{"zero limit", 0, []string{"abc"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tl := newTail(tt.limit)
			for _, w := range tt.writes {
				n, err := tl.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			require.Equal(t, tt.want, string(tl.Bytes()))
			require.Equal(t, tt.truncated, tl.Truncated())
		})
	}
}

func FuzzTail(f *testing.F) {
	f.Add([]byte("hello world"), uint8(3), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, limit, chunk uint8) {
		tl := newTail(int(limit))
		step := max(int(chunk), 1)
		for i := 0; i < len(data); i += step {
			_, _ = tl.Write(data[i:min(i+step, len(data))])
		}
		want := data[max(0, len(data)-int(limit)):]
		if !bytes.Equal(tl.Bytes(), want) {
			t.Fatalf("kept %q, want %q", tl.Bytes(), want)
		}
		if tl.Truncated() != (len(data) > int(limit)) {
			t.Fatalf("truncated %v for %d bytes, limit %d", tl.Truncated(), len(data), limit)
		}
	})
}
