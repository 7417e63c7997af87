package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// expiresIn is how long after it ended the run named name expires, and
// false when it has no expiry.
func expiresIn(t *testing.T, db *sql.DB, name string) (time.Duration, bool) {
	t.Helper()
	var ms sql.NullFloat64
	require.NoError(t, db.QueryRow(`SELECT extract(epoch FROM expires_at - ended_at) * 1000 FROM runs WHERE name = $1`,
		name).Scan(&ms))
	return time.Duration(ms.Float64) * time.Millisecond, ms.Valid
}

// TestRunExpiry: the statement that ends a run stamps its expiry from the
// first layer that says anything about its outcome — its spec's ttl, its
// project's settings, the server's — for one move, several moves in one
// statement and SetRunPhase alike; a run no layer retains, a child run and
// a run not ended have none, and a restart clears it.
func TestRunExpiry(t *testing.T) {
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	ctx := context.Background()
	now := time.Now().UTC()
	create := func(project, name string, ttl *domain.TTL) domain.RunKey {
		spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "t", Plugin: domain.PluginNoop}}, TTL: ttl}
		spec.Normalize()
		key := domain.RunKey{Project: project, Domain: "d", Run: name}
		_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec})
		require.NoError(t, err)
		storetest.StartSteps(t, st, key)
		return key
	}
	end := func(to domain.Phase, keys ...domain.RunKey) {
		require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
			for _, k := range keys {
				if err := tx.Actions().SetRootPhase(ctx, k, domain.PhaseRunning, to, now); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	require.NoError(t, st.Runs().SetSettings(ctx, store.ServerSettings,
		store.ProjectSettings{Retention: &domain.TTL{AfterCompletion: "72h"}}, now))
	require.NoError(t, st.Runs().SetSettings(ctx, "team",
		store.ProjectSettings{Retention: &domain.TTL{AfterFailure: "1h"}}, now))
	set, err := st.Runs().Settings(ctx, "team")
	require.NoError(t, err)
	require.Equal(t, "1h", set.Retention.AfterFailure)

	own := create("team", "own", &domain.TTL{AfterSuccess: "2s", AfterCompletion: "5m"})
	ownFailed := create("team", "own-failed", &domain.TTL{AfterSuccess: "2s", AfterCompletion: "5m"})
	projFailed := create("team", "proj-failed", nil)
	projOK := create("team", "proj-ok", nil)
	server := create("other", "server", nil)
	live := create("team", "live", &domain.TTL{AfterCompletion: "1s"})
	end(domain.PhaseSucceeded, own) // one move
	end(domain.PhaseFailed, ownFailed, projFailed)
	end(domain.PhaseSucceeded, projOK, server)
	for name, want := range map[string]time.Duration{"own": 2 * time.Second, "own-failed": 5 * time.Minute,
		"proj-failed": time.Hour, "proj-ok": 72 * time.Hour, "server": 72 * time.Hour} {
		got, ok := expiresIn(t, db, name)
		require.True(t, ok, name)
		require.Equal(t, want, got, name)
	}
	_, ok := expiresIn(t, db, live.Run)
	require.False(t, ok, "a live run does not expire")

	require.NoError(t, st.Runs().SetSettings(ctx, store.ServerSettings, store.ProjectSettings{}, now))
	kept := create("other", "kept", nil)
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return tx.Runs().SetRunPhase(ctx, kept, domain.PhaseAborted, now)
	}))
	_, ok = expiresIn(t, db, kept.Run)
	require.False(t, ok, "no layer says: kept")
	aborted := create("team", "aborted", nil)
	require.NoError(t, st.Runs().SetRunPhase(ctx, aborted, domain.PhaseAborted, now))
	got, ok := expiresIn(t, db, aborted.Run)
	require.True(t, ok)
	require.Equal(t, time.Hour, got, "SetRunPhase stamps as the root move does")

	leaf := domain.WorkflowSpec{Steps: []domain.Step{{Name: "t", Plugin: domain.PluginNoop}}, TTL: &domain.TTL{AfterCompletion: "1s"}}
	leaf.Normalize()
	parent := largeStep(t, st, db, "parent", 1)
	kid := domain.RunKey{Project: "p", Domain: "d", Run: "parent-big-0"}
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return tx.Runs().CreateChildRuns(ctx, []store.NewRun{{Key: kid, Spec: leaf,
			Child: &store.ChildOf{Parent: parent.Action("big"), Depth: 1}}})
	}))
	storetest.StartSteps(t, st, kid)
	end(domain.PhaseSucceeded, kid)
	_, ok = expiresIn(t, db, kid.Run)
	require.False(t, ok, "a child run goes with its parent")

	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return tx.Runs().ReopenRun(ctx, own, domain.PhaseSucceeded, []string{"t"}, now)
	}))
	_, ok = expiresIn(t, db, own.Run)
	require.False(t, ok, "a restarted run does not expire")
}

// TestReapExpired deletes the expired runs with their child runs and every
// row they own, oldest expiry first, leaves the runs not yet expired
// whole, and postpones an expired run whose attempt is still live.
func TestReapExpired(t *testing.T) {
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	ctx := context.Background()
	parent := largeStep(t, st, db, "parent", 2)
	leaf := domain.WorkflowSpec{Steps: []domain.Step{{Name: "t", Plugin: domain.PluginNoop}}}
	leaf.Normalize()
	kid := domain.RunKey{Project: "p", Domain: "d", Run: "parent-big-0"}
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		return tx.Runs().CreateChildRuns(ctx, []store.NewRun{{Key: kid, Spec: leaf,
			Child: &store.ChildOf{Parent: parent.Action("big"), Depth: 1}}})
	}))
	busy := largeStep(t, st, db, "busy", 1)
	young := largeStep(t, st, db, "young", 1)
	now := time.Now().UTC()
	for name, ago := range map[string]time.Duration{"parent": time.Hour, kid.Run: time.Hour, "busy": 2 * time.Hour,
		"young": -time.Hour} {
		_, err := db.Exec(`UPDATE runs SET phase = 'SUCCEEDED', ended_at = $2::timestamptz,
			expires_at = CASE WHEN parent_run IS NULL THEN $2::timestamptz END WHERE name = $1`, name, now.Add(-ago))
		require.NoError(t, err)
	}
	_, err := db.Exec(`UPDATE attempts SET state = $1 WHERE task_id IN (SELECT id FROM tasks WHERE run_name = 'busy')`,
		int(domain.TaskRunning))
	require.NoError(t, err)
	youngRows, busyRows := rowsOf(t, db, young.Run), rowsOf(t, db, busy.Run)
	var parentWorker string
	require.NoError(t, db.QueryRow(`SELECT DISTINCT a.worker_id::text FROM attempts a JOIN tasks t ON t.id = a.task_id
		WHERE t.run_name = 'parent'`).Scan(&parentWorker))

	keys, err := st.Runs().ExpiredRuns(ctx, now, 10)
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{busy, parent}, keys, "oldest expiry first; a child is not a root; young not expired")
	res, err := st.Runs().ReapExpired(ctx, keys, now, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, res.Runs)
	require.Equal(t, 1, res.Postponed)
	require.ElementsMatch(t, []domain.RunKey{parent, kid}, res.Deleted)
	require.Equal(t, []string{parentWorker}, res.Workers, "the worker that ran parent's attempts")
	require.Equal(t, map[string]int{"runs": 0, "actions": 0, "tasks": 0, "attempts": 0, "run_events": 0,
		"orphan_attempts": 0, "attempt_logs": 0, "attempt_log_chunks": 0, "orphan_logs": 0}, rowsOf(t, db, parent.Run, kid.Run))
	require.Equal(t, youngRows, rowsOf(t, db, young.Run))
	require.Equal(t, busyRows, rowsOf(t, db, busy.Run))
	keys, err = st.Runs().ExpiredRuns(ctx, now, 10)
	require.NoError(t, err)
	require.Empty(t, keys, "the busy run waits a minute")
	keys, err = st.Runs().ExpiredRuns(ctx, now.Add(2*time.Minute), 10)
	require.NoError(t, err)
	require.Equal(t, []domain.RunKey{busy}, keys)
}
