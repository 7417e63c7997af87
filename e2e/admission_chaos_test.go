package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// TestChaosConcurrencyKey runs runs of one concurrency key with max_runs 2
// while the chaos driver kill -9s and restarts every service in turn, wipes
// Redis and drops Postgres's connections (restarts Postgres under make
// chaos): at no sampled moment do more than 2 runs of the key hold a slot
// (read from the rows themselves), every run ends SUCCEEDED, and the ledger
// is empty at the end. The run count is CAPSTAN_CHAOS_KEY_RUNS (default
// 200).
func TestChaosConcurrencyKey(t *testing.T) {
	n := 200
	if v, err := strconv.Atoi(os.Getenv("CAPSTAN_CHAOS_KEY_RUNS")); err == nil && v > 0 {
		n = v
	}
	s := Start(t, bins, Options{Env: []string{"CAPSTAN_EXECUTOR_SLOTS=8"}})
	c := &chaos{t: t, s: s, kinds: map[string]chaosKind{}}
	stopWatch := make(chan struct{})
	most := watchHolders(t, s, "deploy-prod", stopWatch)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.drive(ctx) }()

	spec := keyedSpec(2, "", `sleep 0.05`)
	spec.Concurrency.Key = `"deploy-" + params.ENV`
	kind := chaosKind{name: "keyed", want: api.PhaseSUCCEEDED, spec: spec}
	for i := range n {
		c.submitWith(fmt.Sprintf("key-%04d", i), kind, &api.ParamValues{"ENV": "prod"})
	}
	s.Eventually(2*time.Minute, "one whole cycle of faults", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.faults) >= len(c.faultCycle())
	})
	stop()
	wg.Wait()
	t.Logf("faults injected: %v", c.faults)

	deadline := time.Now().Add(4 * time.Minute)
	pending := map[string]bool{}
	for name := range c.kinds {
		pending[name] = true
	}
	for len(pending) > 0 {
		require.True(t, time.Now().Before(deadline), "%d runs still not terminal", len(pending))
		for name := range pending {
			if run := c.get(name); run != nil && run.EndedAt != nil {
				require.Equal(t, api.PhaseSUCCEEDED, run.Phase, "run %s", name)
				delete(pending, name)
			}
		}
		<-time.After(200 * time.Millisecond)
	}
	close(stopWatch)
	held := most()
	require.LessOrEqual(t, held, 2, "never more than max_runs runs of the key hold a slot")
	require.Positive(t, held, "the sampler saw the slots held")
	s.Eventually(10*time.Second, "the ledger is empty", func() bool { return len(ledger(t, s)) == 0 })
	c.checkDatabase(n)
}
