package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// schedule is a store.Schedule named name in p/d, every minute, of the
// template etl, checked at checkAt (nil: never).
func schedule(name string, checkAt *time.Time) store.Schedule {
	return store.Schedule{Project: "p", Domain: "d", Name: name, WorkflowName: "etl",
		Spec: domain.ScheduleSpec{Interval: "1m"}, CursorAt: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC), CheckAt: checkAt}
}

func at(t time.Time) *time.Time { return &t }

func TestScheduleRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	sch := st.Schedules()
	key := store.ScheduleKey{Project: "p", Domain: "d", Name: "nightly"}

	in := schedule("nightly", nil)
	in.Params = map[string]any{"n": 3.0}
	in.WorkflowVersion = new(int)
	*in.WorkflowVersion = 2
	created, err := sch.CreateSchedule(ctx, in)
	require.NoError(t, err)
	require.Equal(t, int64(1), created.Version)
	_, err = sch.CreateSchedule(ctx, in)
	require.ErrorIs(t, err, store.ErrConflict)

	got, err := sch.GetSchedule(ctx, key)
	require.NoError(t, err)
	require.Equal(t, in.Spec, got.Spec)
	require.Equal(t, in.Params, got.Params)
	require.Equal(t, 2, *got.WorkflowVersion)
	require.True(t, in.CursorAt.Equal(got.CursorAt))
	require.Nil(t, got.CheckAt)
	require.Empty(t, got.Pending)
	require.Empty(t, got.Buffered)

	var updated store.Schedule
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		locked, err := tx.Schedules().LockSchedule(ctx, key)
		if err != nil {
			return err
		}
		locked.Paused, locked.CheckAt = true, at(time.Now())
		locked.Pending = []domain.PendingTime{{At: locked.CursorAt, Overlap: domain.OverlapAllowAll}}
		locked.Spec.Jitter = "5s"
		updated, err = tx.Schedules().UpdateSchedule(ctx, locked)
		return err
	}))
	require.Equal(t, int64(2), updated.Version)
	got, err = sch.GetSchedule(ctx, key)
	require.NoError(t, err)
	require.True(t, got.Paused)
	require.Equal(t, "5s", got.Spec.Jitter)
	require.Len(t, got.Pending, 1)
	require.Equal(t, domain.OverlapAllowAll, got.Pending[0].Overlap)
	require.NotNil(t, got.CheckAt)

	for _, name := range []string{"a", "b", "c"} {
		_, err := sch.CreateSchedule(ctx, schedule(name, nil))
		require.NoError(t, err)
	}
	page, next, err := sch.ListSchedules(ctx, "p", "d", "", 2)
	require.NoError(t, err)
	require.Equal(t, "b", next)
	require.Equal(t, []string{"a", "b"}, []string{page[0].Name, page[1].Name})
	page, next, err = sch.ListSchedules(ctx, "p", "d", next, 2)
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, page, 2)

	require.NoError(t, sch.DeleteSchedule(ctx, key))
	require.ErrorIs(t, sch.DeleteSchedule(ctx, key), store.ErrNotFound)
	_, err = sch.GetSchedule(ctx, key)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = sch.UpdateSchedule(ctx, in)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// Due schedules are locked longest due first; a schedule another
// transaction holds is skipped, not waited for; a firing's record moves
// the state and adds to the counters.
func TestLockDueSchedulesAndRecordFirings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	sch := st.Schedules()
	now := time.Date(2026, 1, 1, 10, 5, 0, 0, time.UTC)
	for name, checkAt := range map[string]*time.Time{"late": at(now.Add(-time.Minute)), "due": at(now),
		"later": at(now.Add(time.Second)), "never": nil} {
		_, err := sch.CreateSchedule(ctx, schedule(name, checkAt))
		require.NoError(t, err)
	}
	next, ok, err := sch.NextCheckAt(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, now.Add(-time.Minute), next)

	due, err := sch.LockDueSchedules(ctx, now, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"due", "late"}, names(due), "by key")
	one, err := sch.LockDueSchedules(ctx, now, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"late"}, names(one), "the longest due first")

	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.InTx(ctx, func(tx *store.Store) error {
			got, err := tx.Schedules().LockDueSchedules(ctx, now, 1)
			if err != nil {
				return err
			}
			if len(got) != 1 || got[0].Name != "late" {
				return errors.New("the first transaction did not lock late")
			}
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	require.NoError(t, st.InTx(ctx, func(tx *store.Store) error {
		got, err := tx.Schedules().LockDueSchedules(ctx, now, 10)
		require.Equal(t, []string{"due"}, names(got), "a held schedule is skipped")
		return err
	}))
	close(release)
	require.NoError(t, <-done)

	key := store.ScheduleKey{Project: "p", Domain: "d", Name: "due"}
	buffered := []time.Time{now.Add(-time.Minute)}
	for range 2 {
		require.NoError(t, sch.RecordFirings(ctx, []store.ScheduleFiring{{Key: key, CursorAt: now, Buffered: buffered,
			Missed: 2, Skipped: 3, CheckAt: at(now.Add(time.Minute))}}))
	}
	got, err := sch.GetSchedule(ctx, key)
	require.NoError(t, err)
	require.Equal(t, now, got.CursorAt.UTC())
	require.Equal(t, int64(4), got.MissedCatchupWindow, "counters add up")
	require.Equal(t, int64(6), got.SkippedOverlap)
	require.Len(t, got.Buffered, 1)
	require.True(t, buffered[0].Equal(got.Buffered[0]))
	require.Equal(t, int64(1), got.Version, "a firing is not a change of the schedule")
	due, err = sch.LockDueSchedules(ctx, now, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"late"}, names(due))
}

func names(scs []store.Schedule) []string {
	out := make([]string, len(scs))
	for i, sc := range scs {
		out[i] = sc.Name
	}
	return out
}

// A schedule's live runs are those not ended; its recent runs are the
// latest by scheduled time.
func TestScheduledRunsReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openWithDB(t)
	spec := twoSteps()
	spec.Normalize()
	base := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	var runs []store.NewRun
	for i := range 12 {
		for _, sched := range []string{"one", "two"} {
			at := base.Add(time.Duration(i) * time.Minute)
			runs = append(runs, store.NewRun{Key: domain.RunKey{Project: "p", Domain: "d", Run: domain.ScheduledRunName(sched, at)},
				Spec: spec, Origin: store.RunOrigin{WorkflowName: "etl", WorkflowVersion: 1, ScheduleName: sched, ScheduledAt: at}})
		}
	}
	res, err := st.Runs().CreateRuns(ctx, runs)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	_, err = db.Exec(`UPDATE runs SET phase = 'SUCCEEDED', ended_at = now() WHERE schedule_name = 'one' AND scheduled_at < $1`,
		base.Add(10*time.Minute))
	require.NoError(t, err)

	one := store.ScheduleKey{Project: "p", Domain: "d", Name: "one"}
	two := store.ScheduleKey{Project: "p", Domain: "d", Name: "two"}
	none := store.ScheduleKey{Project: "p", Domain: "d", Name: "none"}
	live, err := st.Schedules().LiveScheduledRuns(ctx, []store.ScheduleKey{one, two, none})
	require.NoError(t, err)
	require.Equal(t, []string{"one-20260101t101000z", "one-20260101t101100z"}, live[one])
	require.Len(t, live[two], 12)
	require.NotContains(t, live, none)

	recent, err := st.Schedules().RecentScheduledRuns(ctx, []store.ScheduleKey{one, none}, 10)
	require.NoError(t, err)
	require.Len(t, recent[one], 10)
	require.Equal(t, "one-20260101t101100z", recent[one][0].Name, "newest first")
	require.Equal(t, base.Add(11*time.Minute), recent[one][0].ScheduledAt)
	require.Equal(t, "QUEUED", recent[one][0].Phase)
	require.Equal(t, "SUCCEEDED", recent[one][9].Phase)
	require.NotContains(t, recent, none)
}

// TemplateVersions reads the latest or the asked version of each ref in
// one statement, and leaves out what does not exist or is deleted.
func TestTemplateVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	tpl := st.Templates()
	for _, desc := range []string{"one", "two"} {
		_, _, err := tpl.PushTemplate(ctx, template("etl", desc))
		require.NoError(t, err)
	}
	_, _, err := tpl.PushTemplate(ctx, template("gone", "x"))
	require.NoError(t, err)
	require.NoError(t, tpl.DeleteTemplate(ctx, store.TemplateKey{Project: "p", Domain: "d", Name: "gone"}))

	ref := func(name string, v int) store.TemplateRef {
		return store.TemplateRef{TemplateKey: store.TemplateKey{Project: "p", Domain: "d", Name: name}, Version: v}
	}
	got, err := tpl.TemplateVersions(ctx, []store.TemplateRef{ref("etl", 0), ref("etl", 1), ref("etl", 3),
		ref("gone", 0), ref("missing", 0)})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, 2, got[ref("etl", 0)].Version)
	require.Equal(t, "two", got[ref("etl", 0)].Description)
	require.Equal(t, 1, got[ref("etl", 1)].Version)
	require.NotEmpty(t, got[ref("etl", 1)].Spec.Steps)
}
