package retention

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

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
	archive := func(_ context.Context, keys []domain.RunKey) error {
		if fail {
			return errors.New("bucket unreachable")
		}
		archived = append(archived, keys)
		return nil
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
