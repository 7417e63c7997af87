package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

func TestGraceOrigin(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	const outage = 2500 * time.Millisecond
	origin := now.Add(-time.Hour)
	steady := domain.LivenessWatch{Now: now, CheckedAt: now.Add(-time.Second), Origin: origin,
		ServedAt: now.Add(-time.Second)}
	with := func(f func(*domain.LivenessWatch)) domain.LivenessWatch {
		w := steady
		f(&w)
		return w
	}
	cases := []struct {
		rule   string // the rule, quoted from the contract
		watch  domain.LivenessWatch
		failed bool
		want   domain.GraceRestart
	}{
		{"otherwise it stays where it was", steady, false, ""},
		{"the first pass ever", with(func(w *domain.LivenessWatch) { w.CheckedAt, w.Origin = time.Time{}, time.Time{} }),
			false, domain.RestartFirstPass},
		{"a pass that follows a failed pass of the same replica", steady, true, domain.RestartRoundTrip},
		{"a pass more than outage after the previous pass",
			with(func(w *domain.LivenessWatch) { w.CheckedAt = now.Add(-outage - time.Millisecond) }), false,
			domain.RestartSchedulerGap},
		{"a pass exactly outage after the previous one is no gap",
			with(func(w *domain.LivenessWatch) { w.CheckedAt = now.Add(-outage) }), false, ""},
		{"or the clock stepped back", with(func(w *domain.LivenessWatch) { w.CheckedAt = now.Add(time.Minute) }),
			false, domain.RestartSchedulerGap},
		{"the heartbeat path's latest stamp older than outage",
			with(func(w *domain.LivenessWatch) { w.ServedAt = now.Add(-outage - time.Millisecond) }), false,
			domain.RestartHeartbeatPath},
		{"a path never stamped is down", with(func(w *domain.LivenessWatch) { w.ServedAt = time.Time{} }), false,
			domain.RestartHeartbeatPath},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			got, why := domain.GraceOrigin(tc.watch, tc.failed, outage)
			require.Equal(t, tc.want, why)
			if tc.want == "" {
				require.Equal(t, origin, got)
				return
			}
			require.Equal(t, now, got, "every worker gets a fresh grace")
		})
	}
}

func TestJudgeSilence(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	const grace = 5 * time.Second
	cases := []struct {
		rule          string // the rule, quoted from the contract
		alive, silent int
		deferredAt    time.Time
		want          domain.SilenceVerdict
	}{
		{"a minority silent is declared dead", 4, 1, time.Time{}, domain.SilenceVerdict{Declare: true}},
		{"half is not more than half", 2, 1, time.Time{}, domain.SilenceVerdict{Declare: true}},
		{"more than half of the alive workers silent: none dead, deferred one more grace", 5, 3, time.Time{},
			domain.SilenceVerdict{Suspected: true, DeferredAt: now}},
		{"a lone worker silent is all of them", 1, 1, time.Time{}, domain.SilenceVerdict{Suspected: true, DeferredAt: now}},
		{"until a grace after the deferral no worker is declared dead", 5, 1, now.Add(-grace + time.Millisecond),
			domain.SilenceVerdict{DeferredAt: now.Add(-grace + time.Millisecond)}},
		{"a pass at least a grace after the deferral declares dead those still silent", 5, 5, now.Add(-grace),
			domain.SilenceVerdict{Declare: true}},
		{"a pass that finds none silent drops the deferral", 5, 0, now.Add(-time.Second), domain.SilenceVerdict{}},
		{"nothing silent, nothing to do", 3, 0, time.Time{}, domain.SilenceVerdict{}},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, domain.JudgeSilence(tc.alive, tc.silent, tc.deferredAt, now, grace))
		})
	}
}

// Invariants: a pass with no deferral pending never declares more than
// half of the alive workers dead; a deferral is confirmed only a grace
// after it was made; a pass either declares or defers, never both.
func FuzzJudgeSilence(f *testing.F) {
	f.Add(uint16(4), uint16(3), int64(0), false)
	f.Add(uint16(10), uint16(2), int64(4000), true)
	f.Add(uint16(1), uint16(1), int64(6000), true)
	f.Fuzz(func(t *testing.T, alive, silent uint16, sinceDeferMs int64, pending bool) {
		now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		const grace = 5 * time.Second
		if silent > alive {
			alive, silent = silent, alive
		}
		var deferredAt time.Time
		if pending {
			deferredAt = now.Add(-time.Duration(sinceDeferMs%60000) * time.Millisecond)
		}
		v := domain.JudgeSilence(int(alive), int(silent), deferredAt, now, grace)
		require.False(t, v.Declare && (v.Suspected || !v.DeferredAt.IsZero()), "declares or defers")
		if v.Declare && !pending {
			require.LessOrEqual(t, 2*int(silent), int(alive), "a mass death needs its second grace")
		}
		if v.Declare && pending {
			require.GreaterOrEqual(t, now.Sub(deferredAt), grace, "confirmed a grace after the deferral")
		}
		if silent == 0 {
			require.Equal(t, domain.SilenceVerdict{}, v)
		}
	})
}
