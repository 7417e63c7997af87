package firing

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock for a Loop.
type clock struct {
	mu sync.Mutex
	at time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.at = t
	c.mu.Unlock()
}

// fixture is a fresh database with the template etl (one noop step), a
// Redis database of the test's own, and the database open through
// database/sql for reads and faults the store does not offer.
type fixture struct {
	url   string
	st    *store.Store
	db    *sql.DB
	redis asynq.RedisClientOpt
	insp  *asynq.Inspector
	clock *clock
}

// base is the fixtures' starting time: 2026-01-01 10:00 UTC.
var base = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

func newFixture(t *testing.T) *fixture {
	t.Helper()
	url := storetest.NewURL(t)
	f := &fixture{url: url, st: openStore(t, url), redis: redistest.New(t), clock: &clock{at: base}}
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	f.db = db
	f.insp = asynq.NewInspector(f.redis)
	t.Cleanup(func() { f.insp.Close() })
	spec := domain.WorkflowSpec{Params: []domain.Param{{Name: "n", Type: "number", Default: 1.0}},
		Steps: []domain.Step{{Name: "a", Plugin: "noop"}}}
	spec.Normalize()
	require.Empty(t, spec.Validate("spec"))
	tpl := domain.Template{Name: "etl", Spec: spec}
	_, _, err = f.st.Templates().PushTemplate(context.Background(), store.Template{Project: "p", Domain: "d", Name: "etl",
		Spec: spec, Digest: tpl.Digest()})
	require.NoError(t, err)
	return f
}

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), url, store.Config{MaxOpenConns: 8})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// loop returns a firing loop on st (the fixture's when nil) with the
// fixture's clock.
func (f *fixture) loop(t *testing.T, st *store.Store, cfg Config) *Loop {
	t.Helper()
	if st == nil {
		st = f.st
	}
	client := asynq.NewClient(f.redis)
	t.Cleanup(func() { client.Close() })
	log := slog.New(slog.DiscardHandler)
	cfg.Now = f.clock.Now
	return New(st, queue.NewEnqueuer(client, log), log, prometheus.NewRegistry(), cfg)
}

// schedule creates schedule name of the template etl with spec, its cursor
// at the fixture's clock, due at once.
func (f *fixture) schedule(t *testing.T, name string, spec domain.ScheduleSpec) store.ScheduleKey {
	t.Helper()
	require.Empty(t, spec.Validate("spec"))
	now := f.clock.Now()
	sc, err := f.st.Schedules().CreateSchedule(context.Background(), store.Schedule{Project: "p", Domain: "d", Name: name,
		WorkflowName: "etl", Spec: spec, CursorAt: now, CheckAt: &now})
	require.NoError(t, err)
	return sc.Key()
}

// get returns a schedule's row.
func (f *fixture) get(t *testing.T, key store.ScheduleKey) store.Schedule {
	t.Helper()
	sc, err := f.st.Schedules().GetSchedule(context.Background(), key)
	require.NoError(t, err)
	return sc
}

// scheduledRun is a run's name, scheduled time and end.
type scheduledRun struct {
	name        string
	scheduledAt time.Time
	ended       bool
}

// runsOf returns the runs of schedule name, by scheduled time.
func (f *fixture) runsOf(t *testing.T, name string) []scheduledRun {
	t.Helper()
	rows, err := f.db.Query(`SELECT name, scheduled_at, ended_at IS NOT NULL FROM runs WHERE schedule_name = $1
		ORDER BY scheduled_at`, name)
	require.NoError(t, err)
	defer rows.Close()
	var out []scheduledRun
	for rows.Next() {
		var r scheduledRun
		require.NoError(t, rows.Scan(&r.name, &r.scheduledAt, &r.ended))
		r.scheduledAt = r.scheduledAt.UTC()
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// times returns the scheduled times of runs.
func times(runs []scheduledRun) []time.Time {
	out := make([]time.Time, len(runs))
	for i, r := range runs {
		out[i] = r.scheduledAt
	}
	return out
}

// endRuns ends every run of schedule name (SUCCEEDED), as if they finished.
func (f *fixture) endRuns(t *testing.T, name string) {
	t.Helper()
	_, err := f.db.Exec(`UPDATE runs SET phase = 'SUCCEEDED', ended_at = now() WHERE schedule_name = $1 AND ended_at IS NULL`, name)
	require.NoError(t, err)
}

// minutes returns base plus each of ms minutes.
func minutes(ms ...int) []time.Time {
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		out[i] = base.Add(time.Duration(m) * time.Minute)
	}
	return out
}
