package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/archive"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
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
	w, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	require.NoError(t, err)
	_, err = db.Exec(`WITH t AS (INSERT INTO tasks (project, domain, run_name, action_name, idx, plugin, state)
		VALUES ('p', 'd', 'r0', 't', 0, 'noop', 4) RETURNING id)
		INSERT INTO attempts (task_id, number, worker_id, state) SELECT id, 1, $1, 4 FROM t`, w.ID)
	require.NoError(t, err)
	q := &recorder{}
	r := New(st, q, archive, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(),
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

	require.Len(t, q.tasks, 1, "one runs:remove, to the one worker that ran an attempt")
	require.Equal(t, queue.TypeRunsRemove, q.tasks[0].Type())
	var p queue.RunsPayload
	require.NoError(t, json.Unmarshal(q.tasks[0].Payload(), &p))
	require.Contains(t, p.Runs, "r0")

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
	r := New(st, &recorder{}, ArchiveTo(arch, st), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(),
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

// recorder is an Enqueuer that keeps what it is given.
type recorder struct{ tasks []*asynq.Task }

func (r *recorder) Enqueue(_ context.Context, t *asynq.Task, _ ...asynq.Option) error {
	r.tasks = append(r.tasks, t)
	return nil
}
