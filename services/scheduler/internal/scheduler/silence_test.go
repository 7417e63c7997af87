package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// Fenced liveness, against Postgres's clock: the tests move the rows the
// pass reads (storetest.Elapse and the rest), never a Go clock, and never
// wait.

// fleet is a liveness fixture's workers, each running one attempt.
type fleet struct {
	workers  []store.Worker
	attempts []store.Attempt
}

// newFleet registers n workers, each running one attempt it heartbeats,
// with the liveness watch of a control plane that worked for an hour.
func newFleet(t *testing.T, f *liveFixture, n int) fleet {
	t.Helper()
	var fl fleet
	for i := range n {
		w := f.register(t)
		fl.workers = append(fl.workers, w)
		fl.attempts = append(fl.attempts, f.running(t, w, "run-"+string(rune('a'+i))))
		fl.beat(t, f, i)
	}
	f.watched(t)
	return fl
}

// beat records a heartbeat of worker i holding its attempt.
func (fl fleet) beat(t *testing.T, f *liveFixture, i int) {
	t.Helper()
	_, err := storetest.Heartbeat(context.Background(), f.st, fl.workers[i].ID,
		storetest.Beat{Held: []int64{fl.attempts[i].ID}})
	require.NoError(t, err)
}

// state returns worker i's state.
func (fl fleet) state(t *testing.T, f *liveFixture, i int) string {
	t.Helper()
	ws, err := f.st.Workers().WorkerStates(context.Background(), []string{fl.workers[i].ID})
	require.NoError(t, err)
	return ws[fl.workers[i].ID]
}

// elapse makes d pass with the control plane working and workers alive
// beating (the others stay silent).
func (fl fleet) elapse(t *testing.T, f *liveFixture, d time.Duration, alive ...int) {
	t.Helper()
	require.NoError(t, storetest.Elapse(context.Background(), f.db, d))
	for _, i := range alive {
		fl.beat(t, f, i)
	}
}

// TestMassDeathWaitsASecondGrace: "a pass that finds more than half of the
// alive workers silent declares none dead: it defers them one more grace
// ... a pass at least a grace after the deferral declares dead those still
// silent then".
func TestMassDeathWaitsASecondGrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLiveFixture(t, domain.ARCTable)
	fl := newFleet(t, f, 3)
	grace := f.s.cfg.WorkerGrace
	f.silence(t, fl.workers[0].ID, 2*grace)
	f.silence(t, fl.workers[1].ID, 2*grace)

	res, err := f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Dead, "two of three silent at once: a suspected control-plane outage")
	require.Zero(t, res.Lost)
	require.Equal(t, 2, res.Deferred)
	require.InDelta(t, 1, testutil.ToFloat64(f.s.live.suspected), 0)
	for i := range 3 {
		require.Equal(t, store.WorkerAlive, fl.state(t, f, i))
		require.Equal(t, domain.TaskRunning, f.task(t, fl.attempts[i].ID).State)
	}

	res, err = f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Dead, "no worker is declared dead before the second grace")
	require.Equal(t, 2, res.Deferred)
	require.InDelta(t, 1, testutil.ToFloat64(f.s.live.suspected), 0, "deferred once, not at every pass")

	fl.elapse(t, f, grace, 2)
	res, err = f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Dead, "still silent a grace after the deferral: confirmed")
	require.Equal(t, 2, res.Lost)
	require.Zero(t, res.Deferred)
	for i, want := range []string{store.WorkerDead, store.WorkerDead, store.WorkerAlive} {
		require.Equal(t, want, fl.state(t, f, i), "worker %d", i)
	}
	require.Equal(t, domain.TaskPending, f.task(t, fl.attempts[0].ID).State, "the dead workers' tasks requeued")
	require.Equal(t, domain.TaskRunning, f.task(t, fl.attempts[2].ID).State)
}

// TestMassDeathDroppedWhenTheWorkersBeat: a deferral is dropped by a pass
// that finds none silent; the workers that came back are never declared
// dead, and the next mass silence is deferred again.
func TestMassDeathDroppedWhenTheWorkersBeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLiveFixture(t, domain.ARCTable)
	fl := newFleet(t, f, 2)
	grace := f.s.cfg.WorkerGrace
	f.silence(t, fl.workers[0].ID, 2*grace)
	f.silence(t, fl.workers[1].ID, 2*grace)

	res, err := f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Dead)
	require.Equal(t, 2, res.Deferred)

	fl.beat(t, f, 0)
	fl.beat(t, f, 1)
	res, err = f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Dead+res.Deferred, "back before the second grace: nothing silent, the deferral dropped")

	fl.elapse(t, f, 2*grace)
	res, err = f.s.livenessOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Dead, "a new mass silence waits its own second grace")
	require.Equal(t, 2, res.Deferred)
	require.InDelta(t, 2, testutil.ToFloat64(f.s.live.suspected), 0)
}

// TestGraceRestartsAfterAnOutage: "the grace origin moves to now (every
// worker gets a fresh grace) on the first pass ever, on a pass that follows
// a failed pass of the same replica, on a pass more than outage after the
// previous pass, and on a pass that finds the heartbeat path's latest stamp
// older than outage". A worker silent past its grace (one of two: no mass
// death) then survives the pass, and dies a grace later if still silent.
func TestGraceRestartsAfterAnOutage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		outage func(t *testing.T, f *liveFixture)
		want   domain.GraceRestart
	}{
		{"no pass ever ran", func(t *testing.T, f *liveFixture) {
			_, err := f.db.Exec(`UPDATE liveness_watch SET checked_at = NULL, grace_origin = NULL`)
			require.NoError(t, err)
		}, domain.RestartFirstPass},
		{"the scheduler ran no pass for longer than the outage limit", func(t *testing.T, f *liveFixture) {
			require.NoError(t, storetest.StopWatch(context.Background(), f.db, f.s.cfg.Liveness.Outage+time.Second))
		}, domain.RestartSchedulerGap},
		{"no api stamped the heartbeat path for longer than the outage limit", func(t *testing.T, f *liveFixture) {
			require.NoError(t, storetest.StopPath(context.Background(), f.db, f.s.cfg.Liveness.Outage+time.Second))
		}, domain.RestartHeartbeatPath},
		{"the previous pass failed to reach Postgres", func(t *testing.T, f *liveFixture) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			f.s.livenessPass(ctx)
		}, domain.RestartRoundTrip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newLiveFixture(t, domain.ARCTable)
			fl := newFleet(t, f, 2)
			grace := f.s.cfg.WorkerGrace
			f.silence(t, fl.workers[0].ID, 2*grace)
			tt.outage(t, f)

			res, err := f.s.livenessOnce(ctx)
			require.NoError(t, err)
			require.Zero(t, res.Dead, "silent only while heartbeats could not be recorded: a fresh grace")
			require.Equal(t, tt.want, res.Restart)
			require.Zero(t, res.Deferred)
			require.Equal(t, store.WorkerAlive, fl.state(t, f, 0))
			require.Equal(t, domain.TaskRunning, f.task(t, fl.attempts[0].ID).State)
			require.InDelta(t, 1, testutil.ToFloat64(f.s.live.restarts.WithLabelValues(string(tt.want))), 0)

			require.NoError(t, f.st.Workers().StampHeartbeatPath(ctx)) // the api serves again
			res, err = f.s.livenessOnce(ctx)
			require.NoError(t, err)
			require.Empty(t, res.Restart, "the outage is over")
			require.Zero(t, res.Dead, "the fresh grace has not passed")

			fl.elapse(t, f, grace, 1)
			res, err = f.s.livenessOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Dead, "silent for a whole grace since the control plane worked again")
			require.Equal(t, 1, res.Lost)
			require.Equal(t, store.WorkerDead, fl.state(t, f, 0))
			require.Equal(t, store.WorkerAlive, fl.state(t, f, 1))
		})
	}
}
