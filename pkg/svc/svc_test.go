package svc

import (
	"errors"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/stretchr/testify/require"
)

// A service sets its GC defaults only where its environment sets neither of
// Go's own settings: GOGC leaves both to Go, GOMEMLIMIT the limit. The soft
// limit is 90 % of the cgroup's memory limit, or 100 MiB without one.
func TestGCDefaultsYieldToTheEnvironment(t *testing.T) {
	noLimit := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	pod := func() (uint64, error) { return 512 << 20, nil }
	for _, c := range []struct {
		env     map[string]string
		cgroup  func() (uint64, error)
		percent int
		limit   int64
	}{
		{map[string]string{}, noLimit, defaultGCPercent, defaultMemoryLimit},
		{map[string]string{}, pod, defaultGCPercent, 512 << 20 * 9 / 10},
		{map[string]string{}, func() (uint64, error) { return 0, errors.New("no cgroup") }, defaultGCPercent, defaultMemoryLimit},
		{map[string]string{"GOGC": "100"}, pod, 0, 0},
		{map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}, pod, 0, 0},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, pod, defaultGCPercent, 0},
	} {
		percent, limit := gcDefaults(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }, c.cgroup)
		require.Equal(t, c.percent, percent, c.env)
		require.Equal(t, c.limit, limit, c.env)
	}
}
