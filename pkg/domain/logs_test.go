package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Live output is bounded per attempt: past the bound the oldest chunks go.
func TestLogCut(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		total, maxBytes int64
		want            int64
	}{
		{"nothing shipped", 0, 10, 0},
		{"under the bound keeps all", 9, 10, 0},
		{"at the bound keeps all", 10, 10, 0},
		{"past it drops what starts before total-max", 25, 10, 15},
	}
	for _, c := range cases {
		require.Equal(t, c.want, LogCut(c.total, c.maxBytes), c.name)
	}
}
