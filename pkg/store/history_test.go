package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// day is midnight UTC of y-m-d.
func day(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// partNames renders partitions as their table names.
func partNames(ps []store.Partition) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Name())
	}
	return out
}

// partitionNames returns the names of table's day partitions.
func partitionNames(t *testing.T, st *store.Store, table string) []string {
	t.Helper()
	ps, err := st.History().Partitions(context.Background(), table)
	require.NoError(t, err)
	return partNames(ps)
}

// homeOf returns the partition (its table name) that holds table's rows
// matching where, one name per row in order.
func homeOf(t *testing.T, db *sql.DB, table, where string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(`SELECT tableoid::regclass::text FROM `+table+` WHERE `+where, args...)
	require.NoError(t, err)
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

// insertEvent inserts a run_events row of run p/d/run at created and
// returns its id.
func insertEvent(t *testing.T, db *sql.DB, run, typ string, created time.Time) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.QueryRow(`INSERT INTO run_events (project, domain, run_name, type, created_at)
		VALUES ('p', 'd', $1, $2, $3) RETURNING id`, run, typ, created).Scan(&id))
	return id
}

// EnsurePartitions makes each history table's partitions of now's day and
// the days ahead, only once; the rows of a day land in its partition, the
// others in the default one until their day's partition is made, which
// takes them.
func TestEnsurePartitionsMakesEachDayOnceAndRowsLandInTheirDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{})
	now := day(2031, 3, 10).Add(23*time.Hour + 59*time.Minute)

	made, err := st.History().EnsurePartitions(ctx, now, 2)
	require.NoError(t, err)
	var want []string
	for _, table := range store.HistoryTables {
		for _, d := range []string{"20310310", "20310311", "20310312"} {
			want = append(want, table+"_p"+d)
		}
	}
	require.Equal(t, want, partNames(made))
	for _, table := range store.HistoryTables {
		require.Subset(t, partitionNames(t, st, table), []string{table + "_p20310310", table + "_p20310312"})
	}
	again, err := st.History().EnsurePartitions(ctx, now, 2)
	require.NoError(t, err)
	require.Empty(t, again, "a second call makes nothing")

	var bound string
	require.NoError(t, db.QueryRow(`SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = 'run_events_p20310311'`).Scan(&bound))
	require.Contains(t, bound, "FOR VALUES FROM ('2031-03-11 00:00:00+00') TO ('2031-03-12 00:00:00+00')")

	late := insertEvent(t, db, "r", "late", day(2031, 3, 14).Add(time.Hour))
	first := insertEvent(t, db, "r", "first", day(2031, 3, 10))
	last := insertEvent(t, db, "r", "last", day(2031, 3, 11).Add(-time.Microsecond))
	next := insertEvent(t, db, "r", "next", day(2031, 3, 11))
	require.Equal(t, []string{"run_events_p20310310", "run_events_p20310310", "run_events_p20310311", "run_events_default"},
		homeOf(t, db, "run_events", "id = ANY($1) ORDER BY created_at", []int64{first, last, next, late}))

	made, err = st.History().EnsurePartitions(ctx, now, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"run_events_p20310314"}, partNames(made), "the default partition's day gets its partition")
	require.Equal(t, []string{"run_events_p20310314"}, homeOf(t, db, "run_events", "id = $1", late), "and its rows")
	require.Empty(t, homeOf(t, db, "run_events_default", "type = 'late'"))
	var kept int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM run_events WHERE run_name = 'r' AND type IN ('first', 'last', 'next', 'late')`).Scan(&kept))
	require.Equal(t, 4, kept)

	_, err = st.History().EnsurePartitions(ctx, now, -1)
	require.Error(t, err)
	_, err = st.History().Partitions(ctx, "runs")
	require.Error(t, err)
}

// DropPartitionsBefore drops each table's partitions whose whole day is
// before its horizon, with their rows, and nothing else: not a day that
// ends after it, not one that ended within the hour, not the default
// partition.
func TestDropPartitionsBeforeDropsOnlyWholeOldDays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{})
	_, err := st.History().EnsurePartitions(ctx, day(2025, 1, 1), 3)
	require.NoError(t, err)
	_, err = st.History().EnsurePartitions(ctx, time.Now(), 1)
	require.NoError(t, err)
	for d := 1; d <= 4; d++ {
		insertEvent(t, db, "old", fmt.Sprint(d), day(2025, 1, d).Add(12*time.Hour))
	}
	insertEvent(t, db, "old", "default", day(2024, 6, 1))
	count := func() (n int) {
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM run_events WHERE run_name = 'old'`).Scan(&n))
		return n
	}

	dropped, err := st.History().DropPartitionsBefore(ctx, day(2025, 1, 3).Add(12*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{"run_events_p20250101", "run_events_p20250102", "attempt_logs_p20250101",
		"attempt_logs_p20250102", "attempt_log_chunks_p20250101", "attempt_log_chunks_p20250102"}, partNames(dropped),
		"the day the horizon falls in stays")
	require.Equal(t, 3, count(), "the rows of the days that stay, and of the default partition")
	require.Equal(t, []string{"run_events_p20250103", "run_events_p20250104"}, homeOf(t, db, "run_events",
		"run_name = 'old' AND type <> 'default' ORDER BY created_at"))

	dropped, err = st.History().DropPartitionsBefore(ctx, time.Now().AddDate(1, 0, 0))
	require.NoError(t, err)
	require.NotEmpty(t, dropped)
	for _, p := range dropped {
		require.False(t, p.End().After(time.Now().Add(-time.Hour)), "%s could still take rows", p)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	for _, table := range store.HistoryTables {
		require.Contains(t, partitionNames(t, st, table), store.Partition{Table: table, Day: today}.Name())
		require.Contains(t, partitionNames(t, st, table), store.Partition{Table: table, Day: today.AddDate(0, 0, 1)}.Name())
	}
	require.Equal(t, 1, count(), "the default partition's row stays")
	require.Equal(t, []string{"run_events_default"}, homeOf(t, db, "run_events", "run_name = 'old'"))
}

// A partition made while the default partition takes inserts of its day
// moves them all: none is lost, none is left behind, whatever commits
// during the move.
func TestEnsurePartitionsMovesDefaultRowsUnderInserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{})
	d := day(2032, 7, 1)
	stop := make(chan struct{})
	inserted := make(chan int)
	failed := make(chan error, 1)
	go func() {
		n := 0
		defer func() { inserted <- n }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.Exec(`INSERT INTO run_events (project, domain, run_name, type, created_at)
				VALUES ('p', 'd', 'busy', 'x', $1)`, d.Add(time.Duration(i)*time.Millisecond)); err != nil {
				failed <- err
				return
			}
			n++
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM run_events_default WHERE run_name = 'busy'`).Scan(&n))
		if n >= 50 || time.Now().After(deadline) {
			break
		}
	}
	made, err := st.History().EnsurePartitions(ctx, d, 0)
	for err != nil && time.Now().Before(deadline) { // a lock not granted in time: a later round
		made, err = st.History().EnsurePartitions(ctx, d, 0)
	}
	require.NoError(t, err)
	require.Contains(t, partNames(made), "run_events_p20320701")
	close(stop)
	n := <-inserted
	select {
	case err := <-failed:
		require.NoError(t, err, "an insert during the move")
	default:
	}
	require.Greater(t, n, 50)
	var inDay, inDefault int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM run_events_p20320701 WHERE run_name = 'busy'`).Scan(&inDay))
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM run_events_default WHERE run_name = 'busy'`).Scan(&inDefault))
	require.Equal(t, n, inDay, "every row committed is in its day's partition")
	require.Zero(t, inDefault)
}

// A run's events and a domain's, read after an id, come whole and once, in
// id order, when they fall in several partitions — whatever the order of
// their created_at — page after page.
func TestEventsAfterReadsAcrossPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{})
	key := newRun(t, st, "across", domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Command: "x"}}})
	yesterday := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	_, err := st.History().EnsurePartitions(ctx, yesterday, 2)
	require.NoError(t, err)
	var ids []int64
	var homes []string
	for i, at := range []time.Time{yesterday.Add(23 * time.Hour), yesterday.Add(24 * time.Hour), yesterday.Add(23*time.Hour + time.Minute),
		yesterday.Add(25 * time.Hour), yesterday.Add(time.Hour)} {
		var id int64
		require.NoError(t, db.QueryRow(`INSERT INTO run_events (project, domain, run_name, type, created_at)
			VALUES ($1, $2, $3, $4, $5) RETURNING id`, key.Project, key.Domain, key.Run, fmt.Sprint("e", i), at).Scan(&id))
		ids = append(ids, id)
		homes = append(homes, store.Partition{Table: "run_events", Day: at.Truncate(24 * time.Hour)}.Name())
	}
	require.Equal(t, homes, homeOf(t, db, "run_events", "id = ANY($1) ORDER BY id", ids))
	first := ids[0] - 1

	for _, run := range []string{key.Run, ""} {
		var got []int64
		after := first
		for {
			page, err := st.Events().EventsAfter(ctx, store.EventFilter{Project: key.Project, Domain: key.Domain, Run: run}, after, 2)
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			for _, e := range page {
				got = append(got, e.ID)
				after = e.ID
			}
		}
		require.Equal(t, ids, got, "run %q", run)
	}
	var got []int64
	after := first
	for {
		_, _, page, err := st.Events().RunEventsAfter(ctx, key, after, 2)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			got = append(got, e.ID)
			after = e.ID
		}
	}
	require.Equal(t, ids, got)
}

// An attempt's chunks in two partitions read back whole, in seq order,
// and bounding its output drops the oldest whatever partition holds them.
func TestLogChunksReadAcrossPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{})
	a := runningAttempt(t, st, "logs-across")
	yesterday := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	_, err := st.History().EnsurePartitions(ctx, yesterday, 2)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO attempt_log_chunks (attempt_id, stream, data, byte_offset, created_at)
		VALUES ($1, 'stdout', $3, 0, $2), ($1, 'stderr', $4, 4, $2)`, a.ID, yesterday.Add(23*time.Hour), "one\n", "warn\n")
	require.NoError(t, err)
	require.Zero(t, appendBounded(t, st, a.ID, 100, out("two\n")))
	all, err := st.Logs().LogChunksAfter(ctx, a.ID, 0, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"stdout:one\n", "stderr:warn\n", "stdout:two\n"}, texts(all))
	require.Equal(t, []int64{0, 4, 9}, []int64{all[0].ByteOffset, all[1].ByteOffset, all[2].ByteOffset})
	require.Equal(t, []string{store.Partition{Table: "attempt_log_chunks", Day: yesterday}.Name(),
		store.Partition{Table: "attempt_log_chunks", Day: yesterday}.Name(),
		store.Partition{Table: "attempt_log_chunks", Day: yesterday.AddDate(0, 0, 1)}.Name()},
		homeOf(t, db, "attempt_log_chunks", "attempt_id = $1 ORDER BY seq", a.ID))

	require.Equal(t, int64(4), appendBounded(t, st, a.ID, 15, out("three\n")), "yesterday's first chunk goes")
	all, err = st.Logs().LogChunksAfter(ctx, a.ID, 0, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"stdout:-4", "stderr:warn\n", "stdout:two\n", "stdout:three\n"}, texts(all))
}

// An attempt's final output is one attempt_logs row, whatever partition
// holds it: a second one is refused.
func TestFinalAttemptLogIsOneRowAcrossPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := storetest.NewWithDB(t, store.Config{})
	yesterday := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	_, err := st.History().EnsurePartitions(ctx, yesterday, 2)
	require.NoError(t, err)
	exit := 0
	done := func(a store.Attempt) error {
		_, err := storetest.ReportAttempt(ctx, st, a.ID, store.Report{State: domain.TaskSucceeded, ExitCode: &exit,
			Stdout: "out\n"})
		return err
	}
	a := runningAttempt(t, st, "final-once")
	require.NoError(t, done(a))
	l, err := st.Logs().FinalAttemptLog(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, "out\n", l.Stdout)

	b := runningAttempt(t, st, "final-twice")
	_, err = db.Exec(`INSERT INTO attempt_logs (attempt_id, stdout, created_at) VALUES ($1, 'earlier', $2)`,
		b.ID, yesterday.Add(time.Hour))
	require.NoError(t, err)
	require.ErrorIs(t, done(b), store.ErrConflict)
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM attempt_logs WHERE attempt_id = $1`, b.ID).Scan(&n))
	require.Equal(t, 1, n)
	got, err := st.Attempts().GetAttempt(ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, domain.TaskAssigned, got.State, "the report was rolled back")
}

// Migration 23 keeps every row of the tables it partitions, each in its
// day's partition, and their sequences go on; its Down puts the rows back
// in the tables as they were; and it applies again after.
func TestHistoryMigrationKeepsTheRowsBothWays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.NewEmptyURL(t)
	require.NoError(t, store.MigrateTo(ctx, url, 20))
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	old := day(2024, 2, 29).Add(13 * time.Hour)
	for _, q := range []string{
		`INSERT INTO attempts (id, task_id, number, state) VALUES (7, 1, 1, 4)`,
		`INSERT INTO run_events (project, domain, run_name, type, data, created_at) VALUES
			('p', 'd', 'r', 'a', '{"n": 1}', '` + old.Format(time.RFC3339) + `'), ('p', 'd', 'r', 'b', '{}', now())`,
		`INSERT INTO attempt_logs (attempt_id, stdout, stderr, truncated, created_at) VALUES (7, 'o', 'e', true, '` +
			old.Format(time.RFC3339) + `')`,
		`INSERT INTO attempt_log_chunks (attempt_id, stream, data, byte_offset, created_at) VALUES
			(7, 'stdout', 'x', 0, '` + old.Format(time.RFC3339) + `'), (7, 'stderr', 'y', 1, now())`,
	} {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		for table, order := range map[string]string{"run_events": "id", "attempt_logs": "attempt_id", "attempt_log_chunks": "seq"} {
			var s string
			require.NoError(t, db.QueryRow(`SELECT json_agg(x ORDER BY `+order+`)::text FROM `+table+` x`).Scan(&s))
			out[table] = s
		}
		return out
	}
	before := snapshot()

	require.NoError(t, store.MigrateTo(ctx, url, 23))
	require.Equal(t, before, snapshot())
	today := time.Now().UTC().Truncate(24 * time.Hour)
	for _, table := range store.HistoryTables {
		require.Equal(t, []string{table + "_p20240229"}, homeOf(t, db, table, "created_at = $1", old))
		for i := range 4 {
			var n int
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_class WHERE relname = $1`,
				store.Partition{Table: table, Day: today.AddDate(0, 0, i)}.Name()).Scan(&n))
			require.Equal(t, 1, n, "%s: today's and the next days' partitions", table)
		}
		require.Empty(t, homeOf(t, db, table+"_default", "true"))
	}
	var maxID, next int64
	require.NoError(t, db.QueryRow(`SELECT max(id) FROM run_events`).Scan(&maxID))
	next = insertEvent(t, db, "r", "c", time.Now())
	require.Greater(t, next, maxID, "the ids go on")
	after := snapshot()

	require.NoError(t, store.MigrateTo(ctx, url, 20))
	require.Equal(t, after, snapshot())
	var kinds string
	require.NoError(t, db.QueryRow(`SELECT string_agg(relkind::text, '' ORDER BY relname) FROM pg_class
		WHERE relname IN ('run_events', 'attempt_logs', 'attempt_log_chunks')`).Scan(&kinds))
	require.Equal(t, "rrr", kinds, "ordinary tables again")
	require.Greater(t, insertEvent(t, db, "r", "d", time.Now()), next)

	require.NoError(t, store.MigrateTo(ctx, url, 23))
	require.Len(t, homeOf(t, db, "run_events", "run_name = 'r'"), 4)
}
