package svc

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A service sets its GC defaults only where its environment sets neither of
// Go's own settings: GOGC leaves both to Go, GOMEMLIMIT the limit.
func TestGCDefaultsYieldToTheEnvironment(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		percent int
		limit   int64
	}{
		{map[string]string{}, defaultGCPercent, defaultMemoryLimit},
		{map[string]string{"GOGC": "100"}, 0, 0},
		{map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}, 0, 0},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, defaultGCPercent, 0},
	} {
		percent, limit := gcDefaults(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		require.Equal(t, c.percent, percent, c.env)
		require.Equal(t, c.limit, limit, c.env)
	}
}
