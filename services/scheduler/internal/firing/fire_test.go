package firing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// TestCatchupByOverlapPolicy: a run of minute 1 still runs when the loop
// comes back at 10:04:30 with minutes 2 to 4 due; each policy does what
// Temporal's does with the catch-up, and the buffers drain as runs end.
func TestCatchupByOverlapPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	l := f.loop(t, nil, Config{})
	for _, p := range domain.OverlapPolicies {
		f.schedule(t, p, domain.ScheduleSpec{Interval: "1m", Overlap: p})
	}
	f.schedule(t, "window", domain.ScheduleSpec{Interval: "1m", Overlap: domain.OverlapAllowAll, CatchupWindow: "90s"})

	f.clock.set(base.Add(90 * time.Second))
	res, err := l.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, res.Started, "every schedule starts minute 1")
	require.Equal(t, base.Add(2*time.Minute), res.NextCheckAt)

	f.clock.set(base.Add(4*time.Minute + 30*time.Second))
	res, err = l.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, minutes(1), times(f.runsOf(t, "skip")))
	require.Equal(t, int64(3), f.get(t, key("skip")).SkippedOverlap)
	require.Equal(t, minutes(1), times(f.runsOf(t, "buffer_one")))
	require.Equal(t, minutes(2), f.get(t, key("buffer_one")).Buffered)
	require.Equal(t, int64(2), f.get(t, key("buffer_one")).SkippedOverlap)
	require.Equal(t, minutes(1), times(f.runsOf(t, "buffer_all")))
	require.Equal(t, minutes(2, 3, 4), f.get(t, key("buffer_all")).Buffered)
	require.Equal(t, minutes(1, 2, 3, 4), times(f.runsOf(t, "allow_all")))
	require.Equal(t, minutes(1, 4), times(f.runsOf(t, "cancel_other")))
	require.Equal(t, int64(2), f.get(t, key("cancel_other")).SkippedOverlap)
	require.Equal(t, minutes(1, 3, 4), times(f.runsOf(t, "window")), "minute 2 is older than 90s")
	require.Equal(t, int64(1), f.get(t, key("window")).MissedCatchupWindow)
	require.Equal(t, 1, res.Cancelled)
	require.Equal(t, 1, res.Missed)

	// cancel_other aborted minute 1's run through the abort path: ABORTED,
	// an abort request naming the policy, pushed to the reconciler.
	var phase, reason string
	require.NoError(t, f.db.QueryRow(`SELECT r.phase, a.abort_reason FROM runs r JOIN actions a
		ON a.project = r.project AND a.domain = r.domain AND a.run_name = r.name AND a.name = 'a0'
		WHERE r.name = 'cancel_other-20260101t100100z' AND a.abort_requested_at IS NOT NULL`).Scan(&phase, &reason))
	require.Equal(t, "ABORTED", phase)
	require.Contains(t, reason, "cancel_other")
	_, err = f.insp.GetTaskInfo(queue.Abort, "p/d/cancel_other-20260101t100100z/a0")
	require.NoError(t, err, "the abort is pushed to the reconciler")

	// The buffers drain one time per ended run.
	for _, want := range [][]time.Time{minutes(1, 2), minutes(1, 2, 3), minutes(1, 2, 3, 4)} {
		for _, p := range domain.OverlapPolicies {
			f.endRuns(t, p)
		}
		f.clock.set(f.clock.Now().Add(time.Second))
		_, err := l.runOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, want, times(f.runsOf(t, "buffer_all")))
		require.Equal(t, minutes(1, 2), times(f.runsOf(t, "buffer_one")))
		require.Equal(t, minutes(1), times(f.runsOf(t, "skip")))
	}
	require.Empty(t, f.get(t, key("buffer_all")).Buffered)
	sc := f.get(t, key("buffer_all"))
	require.Equal(t, base.Add(5*time.Minute), sc.CheckAt.UTC(), "an empty buffer is not looked at again before the next time")
}

func key(name string) store.ScheduleKey {
	return store.ScheduleKey{Project: "p", Domain: "d", Name: name}
}

// TestReplayStartsNothing: a firing that decides times that already
// started runs (a cursor set back, as a restart replaying the last
// minutes would) creates no run and reports none started.
func TestReplayStartsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	l := f.loop(t, nil, Config{})
	f.schedule(t, "s", domain.ScheduleSpec{Interval: "1m", Overlap: domain.OverlapAllowAll})
	f.clock.set(base.Add(3*time.Minute + 30*time.Second))
	res, err := l.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, res.Started)

	_, err = f.db.Exec(`UPDATE schedules SET cursor_at = $1, check_at = $1`, base)
	require.NoError(t, err)
	res, err = l.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Schedules)
	require.Zero(t, res.Started, "each time already started its run")
	require.Equal(t, minutes(1, 2, 3), times(f.runsOf(t, "s")))
}

// TestFailureBeforeCommitLeavesNothing: a firing transaction that fails
// after creating its runs (a fault Postgres raises on the record of the
// firing, where a scheduler killed before its commit stops) leaves no run
// and the cursor where it was; the next firing starts each time once.
func TestFailureBeforeCommitLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	l := f.loop(t, nil, Config{})
	f.schedule(t, "s", domain.ScheduleSpec{Interval: "1m", Overlap: domain.OverlapAllowAll})
	_, err := f.db.Exec(`CREATE TABLE fault (id int);
		INSERT INTO fault VALUES (1);
		CREATE FUNCTION fail_firing() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF EXISTS (SELECT 1 FROM fault) THEN RAISE EXCEPTION 'injected fault'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER fail_firing BEFORE UPDATE ON schedules FOR EACH ROW EXECUTE FUNCTION fail_firing();`)
	require.NoError(t, err)

	f.clock.set(base.Add(2*time.Minute + time.Second))
	_, err = l.runOnce(ctx)
	require.ErrorContains(t, err, "injected fault")
	require.Empty(t, f.runsOf(t, "s"), "the runs went with the transaction")
	require.Equal(t, base, f.get(t, key("s")).CursorAt.UTC())

	_, err = f.db.Exec(`DELETE FROM fault`)
	require.NoError(t, err)
	res, err := l.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Started)
	require.Equal(t, minutes(1, 2), times(f.runsOf(t, "s")))
	info, err := f.insp.ListPendingTasks(queue.Scheduler)
	require.NoError(t, err)
	require.Len(t, info, 1, "one runs:start for the batch")
	require.Equal(t, queue.TypeRunsStart, info[0].Type)
}

// TestTwoLoopsFireEachTimeOnce: two firing loops on their own pools,
// rounds at the same moments, share 300 schedules firing every second;
// every time starts one run, and the loops together report each once.
func TestTwoLoopsFireEachTimeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	const n = 300
	for i := range n {
		f.schedule(t, fmt.Sprintf("s%03d", i), domain.ScheduleSpec{Interval: "1s", Overlap: domain.OverlapAllowAll})
	}
	loops := []*Loop{f.loop(t, nil, Config{BatchSize: 40, Workers: 2}), f.loop(t, openStore(t, f.url), Config{BatchSize: 40, Workers: 2})}
	started := 0
	for step := range 12 {
		f.clock.set(base.Add(time.Duration(step+1) * 700 * time.Millisecond))
		results, errs := make([]Result, len(loops)), make([]error, len(loops))
		var wg sync.WaitGroup
		for i, l := range loops {
			wg.Go(func() { results[i], errs[i] = l.runOnce(ctx) })
		}
		wg.Wait()
		for i := range loops {
			require.NoError(t, errs[i])
			started += results[i].Started
		}
	}
	end := f.clock.Now().Truncate(time.Second)
	want := int(end.Sub(base) / time.Second)
	require.Equal(t, n*want, started, "no time reported started twice")
	var runs, distinct int
	require.NoError(t, f.db.QueryRow(`SELECT count(*), count(DISTINCT (schedule_name, scheduled_at)) FROM runs`).Scan(&runs, &distinct))
	require.Equal(t, n*want, runs)
	require.Equal(t, runs, distinct)
	for i := range n {
		got := times(f.runsOf(t, fmt.Sprintf("s%03d", i)))
		require.Len(t, got, want)
		for j, at := range got {
			require.Equal(t, base.Add(time.Duration(j+1)*time.Second), at)
		}
	}
}

// TestUnstartableTimesPass: with its template deleted a schedule's times
// pass without runs, and the loop goes on.
func TestUnstartableTimesPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	l := f.loop(t, nil, Config{})
	f.schedule(t, "s", domain.ScheduleSpec{Interval: "1m"})
	require.NoError(t, f.st.Templates().DeleteTemplate(ctx, store.TemplateKey{Project: "p", Domain: "d", Name: "etl"}))
	f.clock.set(base.Add(time.Minute))
	res, err := l.runOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Started)
	require.Empty(t, f.runsOf(t, "s"))
	require.Equal(t, base.Add(time.Minute), f.get(t, key("s")).CursorAt.UTC())
}

// TestPendingTimesStartWhilePaused: a trigger's or a backfill's times,
// recorded in pending, start at the next firing of a paused schedule, with
// the params the template's defaults fill in; then nothing is left to
// check.
func TestPendingTimesStartWhilePaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	l := f.loop(t, nil, Config{})
	k := f.schedule(t, "s", domain.ScheduleSpec{Interval: "1m"})
	require.NoError(t, f.st.InTx(ctx, func(tx *store.Store) error {
		sc, err := tx.Schedules().LockSchedule(ctx, k)
		if err != nil {
			return err
		}
		sc.Paused = true
		sc.Pending, _ = domain.AddPending(nil, minutes(-10, -5), domain.OverlapAllowAll)
		_, err = tx.Schedules().UpdateSchedule(ctx, sc)
		return err
	}))
	f.clock.set(base.Add(10 * time.Minute))
	res, err := l.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Started)
	require.Equal(t, minutes(-10, -5), times(f.runsOf(t, "s")), "no automatic time while paused")
	sc := f.get(t, k)
	require.Empty(t, sc.Pending)
	require.Nil(t, sc.CheckAt)
	require.Equal(t, base, sc.CursorAt.UTC())
	var params string
	require.NoError(t, f.db.QueryRow(`SELECT params::text FROM runs WHERE name = 's-20260101t095000z'`).Scan(&params))
	require.JSONEq(t, `{"n": 1}`, params)
}

// TestStartFiresOnItsOwn: the loop Start begins fires what is due without
// being asked, and ends with its context.
func TestStartFiresOnItsOwn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	l := f.loop(t, nil, Config{Tick: 10 * time.Millisecond})
	f.schedule(t, "s", domain.ScheduleSpec{Interval: "1m"})
	f.clock.set(base.Add(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	l.Start(ctx)
	require.Eventually(t, func() bool { return len(f.runsOf(t, "s")) == 1 }, 10*time.Second, 10*time.Millisecond)
	cancel()
	<-l.Stopped()
	require.Equal(t, 10*time.Millisecond, l.wait(Result{}, nil))
	require.Equal(t, time.Duration(0), l.wait(Result{Schedules: 1, NextCheckAt: base}, nil),
		"a check already due is taken at once")
	require.Equal(t, time.Millisecond, l.wait(Result{NextCheckAt: base}, nil),
		"a due check the round could not take is held elsewhere: ask again soon, not at once")
	require.Equal(t, 10*time.Millisecond, l.wait(Result{Schedules: 1, NextCheckAt: base}, errors.New("down")))
	f.clock.set(base.Add(-time.Millisecond))
	require.Equal(t, time.Millisecond, l.wait(Result{NextCheckAt: base}, nil), "until the next check")
}
