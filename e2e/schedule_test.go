package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// Schedules under failure: one scheduled time starts at most one run,
// whatever kills the scheduler, and the times missed while no scheduler
// ran start (or are counted) as the catch-up window and the overlap policy
// say.

// scheduleEnv shortens the firing loop's tick; a firing transaction takes
// at most 25 schedules, so that a round of 200 is several transactions a
// kill can fall between or inside.
var scheduleEnv = []string{"CAPSTAN_SCHEDULE_TICK=100ms", "CAPSTAN_SCHEDULE_BATCH=25"}

const (
	killedCount    = 200
	killedInterval = 4 * time.Second
	// killedJitter spreads each interval's 200 times over most of it, so
	// that runs are created all the time and a kill lands anywhere.
	killedJitter = "3500ms"
	kills        = 10
)

// TestScheduleOnceWhenSchedulerKilled kill -9s the one scheduler at random
// points (after a random number of runs since its start, none included)
// while 200 schedules fire every 4 s, restarting it at once; every
// scheduled time of the window started exactly one run.
func TestScheduleOnceWhenSchedulerKilled(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1, Env: scheduleEnv})
	k := newKilledSchedules(t, s, []string{"scheduler"})
	k.killAtRandom(func() string { return "scheduler" })
	k.verify()
}

// TestScheduleOnceWhenLeaderKilled is the same with two schedulers, both
// firing, and the one leading killed each time (the other takes the lead).
func TestScheduleOnceWhenLeaderKilled(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1, Env: scheduleEnv})
	s.StartService("scheduler-2")
	k := newKilledSchedules(t, s, []string{"scheduler", "scheduler-2"})
	k.killAtRandom(k.leader)
	k.verify()
}

// killedSchedules is the workload of the kill tests: its stack, the
// scheduler processes and where each one's log began at its last start,
// and the window of scheduled times it checks.
type killedSchedules struct {
	t          *testing.T
	s          *Stack
	db         *sql.DB
	schedulers []string
	logFrom    map[string]int64
	from, to   time.Time
}

// newKilledSchedules pushes a template whose runs wait (a suspend step, so
// no executor works) and creates the 200 allow_all interval schedules; the
// window opens once they all exist.
func newKilledSchedules(t *testing.T, s *Stack, schedulers []string) *killedSchedules {
	k := &killedSchedules{t: t, s: s, db: openDB(t, s), schedulers: schedulers, logFrom: map[string]int64{}}
	pushTemplate(t, s, "wait", api.WorkflowSpec{Steps: []api.Step{{Name: "w", Kind: ptr("suspend"), Duration: ptr("1h")}}})
	for i := range killedCount {
		createSchedule(t, s, api.CreateScheduleRequest{Name: fmt.Sprintf("k%03d", i), Workflow: api.WorkflowRef{Name: "wait"},
			Interval: ptr(killedInterval.String()), Jitter: ptr(killedJitter), Overlap: ptr(api.AllowAll)})
	}
	k.from = time.Now().UTC()
	return k
}

// killAtRandom kills -9 victim() kills times, each after a random number
// (0 to 200) of runs created since the killed process's last start, and
// starts it again at once; the window closes 2 s after the last start.
func (k *killedSchedules) killAtRandom(victim func() string) {
	t, s := k.t, k.s
	var last time.Time
	for i := range kills {
		name := victim()
		start, after := k.runs(), rand.IntN(201)
		s.Eventually(30*time.Second, fmt.Sprintf("%d runs more before kill %d", after, i+1), func() bool {
			return k.runs() >= start+after
		})
		s.Kill(name)
		t.Logf("kill %d: %s after %d runs more (%d in all)", i+1, name, after, k.runs())
		k.restart(name)
		last = time.Now()
	}
	k.to = last.Add(2 * time.Second).UTC()
	s.Eventually(60*time.Second, "every schedule decided the window's times", func() bool {
		var oldest time.Time
		return k.db.QueryRow(`SELECT min(cursor_at) FROM schedules`).Scan(&oldest) == nil && !oldest.Before(k.to)
	})
}

// restart starts scheduler process name again, its log read from here on.
func (k *killedSchedules) restart(name string) {
	if fi, err := os.Stat(k.s.Proc(name).Log); err == nil {
		k.logFrom[name] = fi.Size()
	}
	k.s.StartService(name)
}

// leader returns the scheduler that holds the lead now: the one whose log
// since its last start says it took it.
func (k *killedSchedules) leader() string {
	var lead string
	k.s.Eventually(15*time.Second, "one scheduler leads", func() bool {
		var leading []string
		for _, name := range k.schedulers {
			b, err := os.ReadFile(k.s.Proc(name).Log)
			if err == nil && k.s.Proc(name).Alive() && strings.Contains(string(b[k.logFrom[name]:]), leaderMsg) {
				leading = append(leading, name)
			}
		}
		if len(leading) == 1 {
			lead = leading[0]
		}
		return len(leading) == 1
	})
	return lead
}

// runs counts the runs.
func (k *killedSchedules) runs() int {
	var n int
	require.NoError(k.t, k.db.QueryRow(`SELECT count(*) FROM runs`).Scan(&n))
	return n
}

// verify checks that each schedule's times in the window, every multiple
// of the interval, each started one run, and that nothing was skipped or
// missed.
func (k *killedSchedules) verify() {
	t := k.t
	rows, err := k.db.Query(`SELECT schedule_name, scheduled_at, name FROM runs WHERE scheduled_at > $1 AND scheduled_at <= $2`,
		k.from, k.to)
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]map[time.Time]int{}
	for rows.Next() {
		var sched, name string
		var at time.Time
		require.NoError(t, rows.Scan(&sched, &at, &name))
		at = at.UTC()
		require.Equal(t, sched+"-"+at.Format("20060102t150405z"), name, "a run's name is its schedule's and time's")
		if got[sched] == nil {
			got[sched] = map[time.Time]int{}
		}
		got[sched][at]++
	}
	require.NoError(t, rows.Err())
	var want []time.Time
	for at := k.from.Truncate(killedInterval).Add(killedInterval); !at.After(k.to); at = at.Add(killedInterval) {
		if at.After(k.from) {
			want = append(want, at)
		}
	}
	require.GreaterOrEqual(t, len(want), 4, "the window holds several times of each schedule")
	for i := range killedCount {
		sched := fmt.Sprintf("k%03d", i)
		for _, at := range want {
			require.Equal(t, 1, got[sched][at], "schedule %s at %s", sched, at.Format(time.RFC3339))
		}
		require.Len(t, got[sched], len(want), "schedule %s started only its times", sched)
	}
	var runs, distinct, skipped, missed int
	require.NoError(t, k.db.QueryRow(`SELECT count(*), count(DISTINCT (schedule_name, scheduled_at)) FROM runs`).Scan(&runs, &distinct))
	require.Equal(t, runs, distinct, "no time started twice")
	require.NoError(t, k.db.QueryRow(`SELECT coalesce(sum(skipped_overlap), 0), coalesce(sum(missed_catchup_window), 0)
		FROM schedules`).Scan(&skipped, &missed))
	require.Zero(t, skipped)
	require.Zero(t, missed)
	t.Logf("%d schedules × %d times in the window started once each; %d runs in all", killedCount, len(want), runs)
}

const catchupInterval = 3 * time.Second

// TestScheduleCatchupAfterOutage stops the scheduler (kill -9) for more
// than 3 intervals of three schedules of noop runs and starts it again:
// with buffer_all the three missed times start in order, each once the
// run before ended; with skip the oldest starts and the others are counted
// in skipped_overlap; with a 4 s catch-up window (allow_all) the times
// older than it are counted in missed_catchup_window and the rest start.
func TestScheduleCatchupAfterOutage(t *testing.T) {
	s := Start(t, bins, Options{Executors: 1, Env: scheduleEnv})
	db := openDB(t, s)
	pushTemplate(t, s, "quick", api.WorkflowSpec{Steps: []api.Step{{Name: "a", Plugin: ptr("noop")}}})
	for _, sc := range []api.CreateScheduleRequest{
		{Name: "buffered", Overlap: ptr(api.BufferAll), CatchupWindow: ptr("1m")},
		{Name: "skipped", Overlap: ptr(api.Skip), CatchupWindow: ptr("1m")},
		{Name: "windowed", Overlap: ptr(api.AllowAll), CatchupWindow: ptr("4s")},
	} {
		sc.Workflow, sc.Interval = api.WorkflowRef{Name: "quick"}, ptr(catchupInterval.String())
		createSchedule(t, s, sc)
	}

	// Stop the scheduler just after a time's runs ended, well before the
	// next time.
	var last time.Time
	s.Eventually(30*time.Second, "a time whose runs ended, with the next one well ahead", func() bool {
		runs := scheduledRuns(t, db, "skipped")
		if len(runs) < 2 {
			return false
		}
		latest := runs[len(runs)-1]
		last = latest.scheduledAt
		return latest.endedAt != nil && time.Until(last.Add(catchupInterval)) > time.Second
	})
	s.Kill("scheduler")
	killed := time.Now()
	outage := []time.Time{last.Add(catchupInterval), last.Add(2 * catchupInterval), last.Add(3 * catchupInterval)}
	s.Eventually(30*time.Second, "three scheduled times pass without a scheduler", func() bool {
		return time.Now().After(outage[2].Add(1500 * time.Millisecond))
	})
	restarted := time.Now().UTC()
	s.StartService("scheduler")
	t.Logf("scheduler down %s, from after %s to %s", restarted.Sub(killed).Round(time.Millisecond),
		last.Format(time.RFC3339), restarted.Format(time.RFC3339Nano))

	// buffer_all: every missed time starts, in order, each after the run
	// before it ended.
	s.Eventually(60*time.Second, "the buffered times all ran", func() bool {
		runs := runsIn(scheduledRuns(t, db, "buffered"), outage[0], outage[2])
		return len(runs) == 3 && runs[2].endedAt != nil
	})
	buffered := runsIn(scheduledRuns(t, db, "buffered"), last, outage[2])
	require.Equal(t, append([]time.Time{last}, outage...), timesOf(buffered))
	for i := 2; i < len(buffered); i++ {
		require.False(t, buffered[i].createdAt.Before(*buffered[i-1].endedAt),
			"%s started after %s ended", buffered[i].name, buffered[i-1].name)
	}
	require.True(t, buffered[1].createdAt.After(restarted), "the first missed time started after the restart")

	// skip: the oldest missed time starts, the others are skipped.
	skipped := runsIn(scheduledRuns(t, db, "skipped"), outage[0], outage[2])
	require.Equal(t, outage[:1], timesOf(skipped), "the oldest missed time started, alone")
	skippedSchedule := getSchedule(t, s, "skipped")
	require.GreaterOrEqual(t, skippedSchedule.SkippedOverlap, int64(2))
	require.Zero(t, skippedSchedule.MissedCatchupWindow)

	// A catch-up window shorter than the outage: the older times are
	// counted, the younger start.
	s.Eventually(30*time.Second, "the windowed schedule decided the outage", func() bool {
		return !getScheduleCursor(t, db, "windowed").Before(outage[2])
	})
	windowed := getSchedule(t, s, "windowed")
	started := runsIn(scheduledRuns(t, db, "windowed"), outage[0], outage[2])
	require.GreaterOrEqual(t, windowed.MissedCatchupWindow, int64(1), "the oldest outage times are older than 4 s")
	require.Equal(t, 3, int(windowed.MissedCatchupWindow)+len(started), "each outage time started or was counted")
	require.Equal(t, outage[windowed.MissedCatchupWindow:], timesOf(started), "the missed times are the oldest")
	require.Zero(t, windowed.SkippedOverlap)
	t.Logf("buffer_all started %d missed times in order; skip started 1 and skipped %d; a 4s window missed %d and started %d",
		len(outage), skippedSchedule.SkippedOverlap, windowed.MissedCatchupWindow, len(started))
}

// pushTemplate registers the template name of spec through the api.
func pushTemplate(t testing.TB, s *Stack, name string, spec api.WorkflowSpec) {
	t.Helper()
	resp, err := s.Client.PushWorkflowWithResponse(context.Background(), project, domain,
		api.PushWorkflowRequest{Name: name, Spec: spec})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON201, "push workflow %s: %d %s", name, resp.StatusCode(), resp.Body)
}

// createSchedule creates sc through the api.
func createSchedule(t *testing.T, s *Stack, sc api.CreateScheduleRequest) {
	t.Helper()
	resp, err := s.Client.CreateScheduleWithResponse(context.Background(), project, domain, sc)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON201, "create schedule %s: %d %s", sc.Name, resp.StatusCode(), resp.Body)
}

// getSchedule reads schedule name through the api.
func getSchedule(t *testing.T, s *Stack, name string) *api.Schedule {
	t.Helper()
	resp, err := s.Client.GetScheduleWithResponse(context.Background(), project, domain, name)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "get schedule %s: %d %s", name, resp.StatusCode(), resp.Body)
	return resp.JSON200
}

// getScheduleCursor reads schedule name's cursor, the latest automatic
// time it decided.
func getScheduleCursor(t *testing.T, db *sql.DB, name string) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, db.QueryRow(`SELECT cursor_at FROM schedules WHERE name = $1`, name).Scan(&at))
	return at.UTC()
}

// scheduledRunRow is one run of a schedule as the tests read it.
type scheduledRunRow struct {
	name        string
	scheduledAt time.Time
	createdAt   time.Time
	endedAt     *time.Time
}

// scheduledRuns returns the runs of schedule name, by scheduled time.
func scheduledRuns(t *testing.T, db *sql.DB, name string) []scheduledRunRow {
	t.Helper()
	rows, err := db.Query(`SELECT name, scheduled_at, created_at, ended_at FROM runs WHERE schedule_name = $1
		ORDER BY scheduled_at`, name)
	require.NoError(t, err)
	defer rows.Close()
	var out []scheduledRunRow
	for rows.Next() {
		var r scheduledRunRow
		require.NoError(t, rows.Scan(&r.name, &r.scheduledAt, &r.createdAt, &r.endedAt))
		r.scheduledAt = r.scheduledAt.UTC()
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// runsIn returns the runs scheduled in [from, to].
func runsIn(runs []scheduledRunRow, from, to time.Time) []scheduledRunRow {
	var out []scheduledRunRow
	for _, r := range runs {
		if !r.scheduledAt.Before(from) && !r.scheduledAt.After(to) {
			out = append(out, r)
		}
	}
	return out
}

// timesOf returns the scheduled times of runs.
func timesOf(runs []scheduledRunRow) []time.Time {
	out := make([]time.Time, len(runs))
	for i, r := range runs {
		out[i] = r.scheduledAt
	}
	return out
}
