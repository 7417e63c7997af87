package main

import (
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/stretchr/testify/require"
)

func parse(t *testing.T, vars map[string]string) config {
	t.Helper()
	cfg, err := env.ParseAsWithOptions[config](env.Options{Environment: vars}) // never the process's environment
	require.NoError(t, err)
	return cfg
}

// TestDeadWorkerRetention: CAPSTAN_DEAD_WORKER_RETENTION (a Go duration,
// default 1h) is the liveness pass's DeadRetention; a negative one is
// refused before anything connects.
func TestDeadWorkerRetention(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		vars map[string]string
		want time.Duration
	}{
		{"unset: 1h", map[string]string{}, time.Hour},
		{"set", map[string]string{"CAPSTAN_DEAD_WORKER_RETENTION": "90s"}, 90 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := parse(t, tt.vars)
			require.NoError(t, cfg.validate())
			require.Equal(t, tt.want, cfg.scheduler(nil).Liveness.DeadRetention)
		})
	}
	negative := parse(t, map[string]string{"CAPSTAN_DEAD_WORKER_RETENTION": "-1m"})
	require.ErrorContains(t, negative.validate(), "Liveness.DeadRetention: -1m0s is negative")
}
