package retention

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/archive"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// A round deletes every expired run, batch after batch, each batch handed
// to the archive first; an archive that fails keeps the batch whole. The
// server's defaults are published for the expiry of runs that end.
func TestRoundArchivesThenDeletesInBatches(t *testing.T) {
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	ctx := context.Background()
	now := time.Now().UTC()
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "t", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	for i := range 7 {
		key := domain.RunKey{Project: "p", Domain: "d", Run: fmt.Sprintf("r%d", i)}
		_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec})
		require.NoError(t, err)
	}
	_, err := db.Exec(`UPDATE runs SET phase = 'SUCCEEDED', ended_at = $1::timestamptz, expires_at = $1::timestamptz
		WHERE name <> 'r6'`, now.Add(-time.Minute))
	require.NoError(t, err)
	var archived [][]domain.RunKey
	fail := true
	archive := func(_ context.Context, keys []domain.RunKey) ([]domain.RunKey, error) {
		if fail {
			return nil, errors.New("bucket unreachable")
		}
		archived = append(archived, keys)
		return keys, nil
	}
	r := New(st, archive, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(),
		Config{Batch: 4, Defaults: domain.TTL{AfterFailure: "1h"}, Now: func() time.Time { return now }})
	left := func() int {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM runs`).Scan(&n))
		return n
	}
	n, err := r.Round(ctx)
	require.ErrorContains(t, err, "bucket unreachable")
	require.Zero(t, n)
	require.Equal(t, 7, left(), "nothing deleted without its archive")

	fail = false
	n, err = r.Round(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.Equal(t, 1, left(), "the run not expired stays")
	require.Len(t, archived, 2)
	require.Len(t, archived[0], 4)
	require.Len(t, archived[1], 2)

	require.NoError(t, r.Publish(ctx))
	set, err := st.Runs().Settings(ctx, store.ServerSettings)
	require.NoError(t, err)
	require.Equal(t, &domain.TTL{AfterFailure: "1h"}, set.Retention)
}

// ArchiveTo archives an expired run with its child run into a file://
// bucket before the round deletes them, and leaves out, for later, a run
// whose child has not ended.
func TestRoundArchivesEachTree(t *testing.T) {
	st, db := storetest.NewWithDB(t, store.Config{MaxOpenConns: 4})
	ctx := context.Background()
	now := time.Now().UTC()
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "t", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	for _, name := range []string{"done", "busy"} {
		key := domain.RunKey{Project: "p", Domain: "d", Run: name}
		_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec})
		require.NoError(t, err)
		storetest.StartSteps(t, st, key)
		require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
			return tx.Runs().CreateChildRuns(ctx, []store.NewRun{{Key: domain.RunKey{Project: "p", Domain: "d", Run: name + "-kid"},
				Spec: spec, Child: &store.ChildOf{Parent: key.Action("t"), Depth: 1}}})
		}))
	}
	_, err := db.Exec(`UPDATE runs SET phase = 'SUCCEEDED', ended_at = $1::timestamptz,
		expires_at = CASE WHEN parent_run IS NULL THEN $1::timestamptz END WHERE name <> 'busy-kid'`, now.Add(-time.Minute))
	require.NoError(t, err)
	arch, err := archive.Open(ctx, "file://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { arch.Close() })
	r := New(st, ArchiveTo(arch, st), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(),
		Config{Now: func() time.Time { return now }})
	n, err := r.Round(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "done and its child")
	for _, name := range []string{"done", "done-kid"} {
		doc, err := arch.Get(ctx, domain.RunKey{Project: "p", Domain: "d", Run: name})
		require.NoError(t, err, name)
		require.Equal(t, name, doc.Detail().Run.Name)
	}
	var left string
	require.NoError(t, db.QueryRow(`SELECT string_agg(name, ',' ORDER BY name) FROM runs`).Scan(&left))
	require.Equal(t, "busy,busy-kid", left)
	var later time.Time
	require.NoError(t, db.QueryRow(`SELECT expires_at FROM runs WHERE name = 'busy'`).Scan(&later))
	require.True(t, later.After(now), "a tree not ended waits")
}
