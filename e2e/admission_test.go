package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// keyedSpec is a one-step spec whose runs share the concurrency key of the
// param ENV (max_runs max, strategy), its step running command.
func keyedSpec(max int, strategy, command string) api.WorkflowSpec {
	c := &api.Concurrency{Key: "params.ENV", MaxRuns: max}
	if strategy != "" {
		c.Strategy = ptr(api.ConcurrencyStrategy(strategy))
	}
	return api.WorkflowSpec{Params: &[]api.Param{{Name: "ENV", Required: ptr(true)}}, Concurrency: c,
		Steps: []api.Step{{Name: "work", Command: ptr(command)}}}
}

// createKeyed creates a run of spec with ENV env and returns its name.
func createKeyed(t *testing.T, s *Stack, spec api.WorkflowSpec, env string) string {
	t.Helper()
	resp, err := s.Client.CreateRunWithResponse(context.Background(), project, domain, nil,
		api.CreateRunRequest{Spec: &spec, Params: &api.ParamValues{"ENV": env}})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON201, "create: %d %s", resp.StatusCode(), resp.Body)
	return resp.JSON201.Name
}

// holdersSQL counts the runs of a key that hold a slot as Postgres has
// them (sampled directly, not through the ledger): admitted and
// unfinished, or with a live attempt.
const holdersSQL = `SELECT count(*) FROM runs r WHERE r.concurrency_key = $1
	AND ((r.admitted_at IS NOT NULL AND r.ended_at IS NULL) OR EXISTS (SELECT 1 FROM attempts a JOIN tasks t ON t.id = a.task_id
		WHERE (t.project, t.domain, t.run_name) = (r.project, r.domain, r.name) AND a.state IN (2, 3, 9)))`

// watchHolders samples holdersSQL of key every 20 ms until stop is closed;
// the function it returns waits for that and returns the most it saw.
func watchHolders(t *testing.T, s *Stack, key string, stop <-chan struct{}) func() int {
	db := openDB(t, s)
	var most int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var n int
				if err := db.QueryRow(holdersSQL, key).Scan(&n); err == nil {
					most = max(most, n)
				}
			}
		}
	}()
	return func() int { wg.Wait(); return most }
}

// TestConcurrencyQueue runs 8 runs of one key with max_runs 2 and 3 of
// another: never more than 2 of the first hold a slot, they start in
// creation order, a waiting run shows its key and place, the other key is
// not held back, and the ledger is empty at the end.
func TestConcurrencyQueue(t *testing.T) {
	s := Start(t, bins, Options{})
	spec := keyedSpec(2, "", `sleep 0.4; date +%s%N > "$CAPSTAN_OUTPUTS_DIR/at"`)
	spec.Steps[0].Outputs = &[]string{"at"}
	stop := make(chan struct{})
	most := watchHolders(t, s, "prod", stop)
	var prod []string
	for range 8 {
		prod = append(prod, createKeyed(t, s, spec, "prod"))
	}
	var dev []string
	for range 3 {
		dev = append(dev, createKeyed(t, s, spec, "dev"))
	}
	last := getRun(t, s, prod[7])
	if last.PendingReason != nil {
		require.Contains(t, *last.PendingReason, `concurrency key "prod"`)
		require.Contains(t, *last.PendingReason, "in line for 2 slots")
	}
	for _, name := range dev {
		waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
	}
	var starts []string
	for _, name := range prod {
		run := waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
		require.Equal(t, ptr("prod"), run.ConcurrencyKey)
		require.Nil(t, run.PendingReason, "an admitted run waits for nothing")
		starts = append(starts, strings.TrimSpace((*action(run, "work").Outputs)["at"]))
	}
	close(stop)
	require.LessOrEqual(t, most(), 2, "never more than max_runs runs of a key hold its slot")
	for i := 2; i < len(starts); i++ { // FIFO: run i starts after run i-2 (its slot's last holder) ended
		require.Less(t, starts[i-2], starts[i], "run %d started before run %d", i, i-2)
	}
	require.Empty(t, ledger(t, s), "no key holds or waits at the end")
}

// ledger reads the concurrency ledger of the test project's domain.
func ledger(t *testing.T, s *Stack) []api.ConcurrencyKey {
	t.Helper()
	resp, err := s.Client.GetConcurrencyWithResponse(context.Background(), project, domain)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "ledger: %d %s", resp.StatusCode(), resp.Body)
	return resp.JSON200.Keys
}

// TestConcurrencyCancelNewest: with cancel_newest, a run over the limit
// ends ABORTED at once with reason concurrency, and the holder runs on.
func TestConcurrencyCancelNewest(t *testing.T) {
	s := Start(t, bins, Options{})
	dir := s.SharedDir()
	spec := keyedSpec(1, "cancel_newest", fmt.Sprintf(`while [ ! -e %s/go ]; do sleep 0.05; done`, dir))
	first := createKeyed(t, s, spec, "prod")
	waitStep(t, s, first, "work", 30*time.Second, api.PhaseRUNNING)
	second := createKeyed(t, s, spec, "prod")
	run := waitPhase(t, s, second, 30*time.Second, api.PhaseABORTED)
	require.NotNil(t, action(run, "a0").Abort)
	require.Equal(t, ptr("concurrency"), action(run, "a0").Abort.Reason)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	waitPhase(t, s, first, 30*time.Second, api.PhaseSUCCEEDED)
}

// TestConcurrencyCancelInProgress: with cancel_in_progress, a new run
// aborts the running one (reason concurrency) and its first task starts
// only once the old run's process is gone.
func TestConcurrencyCancelInProgress(t *testing.T) {
	s := Start(t, bins, Options{})
	dir := s.SharedDir()
	// The old run's process traps SIGTERM and takes 0.5 s to exit; it
	// records its exit, and the new run's task records its start.
	spec := keyedSpec(1, "cancel_in_progress", fmt.Sprintf(`if [ -e %[1]s/first ]; then date +%%s%%N > %[1]s/started; exit 0; fi
touch %[1]s/first; trap 'sleep 0.5; date +%%s%%N > %[1]s/exited; exit 1' TERM; while true; do sleep 0.05; done`, dir))
	spec.Steps[0].KillGrace = ptr("5s")
	old := createKeyed(t, s, spec, "prod")
	waitStep(t, s, old, "work", 30*time.Second, api.PhaseRUNNING)
	s.Eventually(10*time.Second, "the old run's process started", func() bool {
		_, err := os.Stat(filepath.Join(dir, "first"))
		return err == nil
	})
	newer := createKeyed(t, s, spec, "prod")
	run := waitPhase(t, s, old, 30*time.Second, api.PhaseABORTED)
	require.Equal(t, ptr("concurrency"), action(run, "a0").Abort.Reason)
	waitPhase(t, s, newer, 30*time.Second, api.PhaseSUCCEEDED)
	exited, err := os.ReadFile(filepath.Join(dir, "exited"))
	require.NoError(t, err, "the old run's process got SIGTERM and exited")
	started, err := os.ReadFile(filepath.Join(dir, "started"))
	require.NoError(t, err)
	require.Less(t, strings.TrimSpace(string(exited)), strings.TrimSpace(string(started)),
		"the new run's task started after the old run's process was gone")
}
