package domain_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

const sec = time.Second

// KubeVela's workflow backoff time: int(0.05 * 2^(n-1)), minimal backoff 1
// second; its documentation says "the first ten backoff time will be like"
// this table.
var kubeVelaFirstTen = []struct {
	n    int
	want time.Duration
	row  string
}{
	{1, 1 * sec, "| 1 | 1 | 0.05 | 1 |"},
	{2, 1 * sec, "| 2 | 2 | 0.1 | 1 |"},
	{3, 1 * sec, "| 3 | 4 | 0.2 | 1 |"},
	{4, 1 * sec, "| 4 | 8 | 0.4 | 1 |"},
	{5, 1 * sec, "| 5 | 16 | 0.8 | 1 |"},
	{6, 1 * sec, "| 6 | 32 | 1.6 | 1 |"},
	{7, 3 * sec, "| 7 | 64 | 3.2 | 3 |"},
	{8, 6 * sec, "| 8 | 128 | 6.4 | 6 |"},
	{9, 12 * sec, "| 9 | 256 | 12.8 | 12 |"},
	{10, 25 * sec, "| 10 | 512 | 25.6 | 25 |"},
}

func TestKubeVelaFirstTen(t *testing.T) {
	t.Parallel()
	for _, cap := range []time.Duration{0, domain.KubeVelaWaitCap, domain.KubeVelaFailedCap} {
		for _, tc := range kubeVelaFirstTen {
			require.Equal(t, tc.want, domain.KubeVela{Cap: cap}.Delay(tc.n), "KubeVela row %s (Cap %v)", tc.row, cap)
		}
	}
}

func TestKubeVelaCaps(t *testing.T) {
	t.Parallel()
	// "If the workflow step is waiting, the max backoff time is 60s";
	// "If the workflow step is failed, the max backoff time is 300s";
	// "the workflow will retry at most 10 times by default".
	require.Equal(t, 60*sec, domain.KubeVelaWaitCap)
	require.Equal(t, 300*sec, domain.KubeVelaFailedCap)
	require.Equal(t, 10, domain.KubeVelaMaxRetries)

	wait := domain.KubeVela{Cap: domain.KubeVelaWaitCap}
	failed := domain.KubeVela{Cap: domain.KubeVelaFailedCap}
	def := domain.KubeVela{}
	tests := []struct {
		name string
		k    domain.KubeVela
		n    int
		want time.Duration
	}{
		{"n=11: int(0.05*1024)=51 s, under the 60 s wait cap", wait, 11, 51 * sec},
		{"n=12: int(0.05*2048)=102 s -> capped at 60 s while waiting", wait, 12, 60 * sec},
		{"n=12: 102 s is under the 300 s failed cap", failed, 12, 102 * sec},
		{"n=13: int(0.05*4096)=204 s under the failed cap", failed, 13, 204 * sec},
		{"n=14: int(0.05*8192)=409 s -> capped at 300 s after a failure", failed, 14, 300 * sec},
		{"default Cap is 300 s (KubeVelaFailedCap)", def, 14, 300 * sec},
		{"n=30 waiting -> 60 s", wait, 30, 60 * sec},
		{"n=1000 failed -> 300 s", failed, 1000, 300 * sec},
		{"custom cap 10 s", domain.KubeVela{Cap: 10 * sec}, 9, 10 * sec},
		{"n=0 is treated as the first retry: minimal backoff 1 s", def, 0, 1 * sec},
		{"n<0 is treated as the first retry: minimal backoff 1 s", def, -5, 1 * sec},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.k.Delay(tc.n))
		})
	}
}

// "The backoff time will increase by the retry times", between the 1 s
// minimum and the cap, for every retry count: a waiting step retries without
// limit, so n grows past 10 (one wait retry per minute, n=39 is ~40 minutes).
func TestKubeVelaBoundedAndNonDecreasingForAllN(t *testing.T) {
	t.Parallel()
	for _, cap := range []time.Duration{domain.KubeVelaWaitCap, domain.KubeVelaFailedCap} {
		k := domain.KubeVela{Cap: cap}
		prev := time.Duration(0)
		for n := 1; n <= 200; n++ {
			d := k.Delay(n)
			require.GreaterOrEqual(t, d, 1*sec, "Cap %v: Delay(%d) = %v is below the 1 s minimum", cap, n, d)
			require.LessOrEqual(t, d, cap, "Cap %v: Delay(%d) = %v is above the cap", cap, n, d)
			require.GreaterOrEqual(t, d, prev, "Cap %v: Delay(%d) = %v < Delay(%d) = %v", cap, n, d, n-1, prev)
			prev = d
		}
	}
}

// Flyte's AbortReconciler: ceiling := InitialDelay * (1 << (attemptCount - 1)),
// capped at MaxDelay; InitialDelay 1s, MaxDelay 5m.
func TestFullJitterCeiling(t *testing.T) {
	t.Parallel()
	def := domain.FullJitter{}
	want := []time.Duration{1 * sec, 2 * sec, 4 * sec, 8 * sec, 16 * sec, 32 * sec, 64 * sec, 128 * sec, 256 * sec, 300 * sec, 300 * sec}
	for i, w := range want {
		require.Equal(t, w, def.Ceiling(i+1), "defaults InitialDelay 1s, MaxDelay 5m: Ceiling(%d)", i+1)
	}
	require.Equal(t, 5*time.Minute, def.Ceiling(64), "capped at MaxDelay")
	require.Equal(t, 5*time.Minute, def.Ceiling(10_000), "capped at MaxDelay")
	require.Equal(t, 1*sec, def.Ceiling(0), "n<1 is the first retry")
	require.Equal(t, 1*sec, def.Ceiling(-7), "n<1 is the first retry")

	custom := domain.FullJitter{Initial: 100 * time.Millisecond, Max: sec}
	for n, w := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: sec, 6: sec, 50: sec} {
		require.Equal(t, w, custom.Ceiling(n), "Initial 100ms, Max 1s: Ceiling(%d)", n)
	}
	require.Equal(t, 2*sec, domain.FullJitter{Initial: 5 * sec, Max: 2 * sec}.Ceiling(1), "Initial above Max is capped at Max")
	require.Equal(t, 3*sec, domain.FullJitter{Max: 3 * sec}.Ceiling(5), "default Initial with a custom Max")
	require.Equal(t, 4*time.Minute, domain.FullJitter{Initial: time.Minute}.Ceiling(3), "custom Initial: 1m·2^2")
	require.Equal(t, 5*time.Minute, domain.FullJitter{Initial: time.Minute}.Ceiling(4), "custom Initial: 1m·2^3 = 8m capped at the default 5m Max")
}

// Flyte's AbortReconciler: delay := time.Duration(rand.Int63n(int64(ceiling) + 1)), i.e.
// uniform in [0, ceiling], both ends included.
func TestFullJitterDelayUsesCeilingPlusOne(t *testing.T) {
	t.Parallel()
	var asked []int64
	top := domain.FullJitter{Rand: func(n int64) int64 { asked = append(asked, n); return n - 1 }}
	for n := 1; n <= 12; n++ {
		require.Equal(t, top.Ceiling(n), top.Delay(n), "largest draw is the ceiling itself (n=%d)", n)
	}
	require.Equal(t, int64(sec)+1, asked[0], "rand.Int63n(int64(ceiling) + 1)")
	require.Equal(t, int64(300*sec)+1, asked[len(asked)-1])

	bottom := domain.FullJitter{Rand: func(int64) int64 { return 0 }}
	require.Equal(t, time.Duration(0), bottom.Delay(7), "smallest draw is 0 (full jitter)")
}

func TestFullJitterDelayDistribution(t *testing.T) {
	t.Parallel()
	for _, f := range []domain.FullJitter{{}, {Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}} {
		for _, n := range []int{1, 3, 9, 20} {
			ceiling := f.Ceiling(n)
			seen := map[time.Duration]bool{}
			low, high := 0, 0
			const draws = 2000
			for range draws {
				d := f.Delay(n)
				require.GreaterOrEqual(t, d, time.Duration(0))
				require.LessOrEqual(t, d, ceiling, "Delay(%d) above its ceiling %v", n, ceiling)
				seen[d] = true
				if d < ceiling/2 {
					low++
				} else {
					high++
				}
			}
			// Not constant, and spread over the whole range (each half gets
			// a fair share; failing chance is astronomically small).
			require.Greater(t, len(seen), draws/2, "Delay(%d) is not random enough: %d distinct values", n, len(seen))
			require.Greater(t, low, draws/4, "Delay(%d): too few draws below ceiling/2", n)
			require.Greater(t, high, draws/4, "Delay(%d): too few draws above ceiling/2", n)
		}
	}
}

// Ceiling must stay within (0, Max] for any configuration; with Initial 1s a
// MaxDelay above 2^33 s (~272 years) makes Initial·2^k overflow int64 before
// reaching Max, Ceiling goes negative, and Delay then calls rand.Int64N with
// a non-positive bound and panics. (Max is MaxInt64-1 so that Delay's
// ceiling+1 itself cannot overflow.)
func TestFullJitterHugeMaxDoesNotOverflow(t *testing.T) {
	t.Parallel()
	f := domain.FullJitter{Initial: sec, Max: time.Duration(math.MaxInt64 - 1)}
	prev := time.Duration(0)
	for n := 1; n <= 100; n++ {
		c := f.Ceiling(n)
		require.Positive(t, c, "Ceiling(%d) = %v", n, c)
		require.GreaterOrEqual(t, c, prev, "Ceiling(%d) = %v < Ceiling(%d) = %v", n, c, n-1, prev)
		prev = c
		require.NotPanics(t, func() { _ = f.Delay(n) }, "Delay(%d)", n)
	}
}

// actions-runner-controller PR #4059: failedRunnerBackoff = 0, 5 s, 10 s,
// 20 s, 40 s, 80 s, indexed by the number of failures; Capstan applies it as
// [0, 5s, 10s, 20s, 40s, 80s][n] (CAPSTAN_WORKER_BACKOFF_TABLE).
func TestARCTable(t *testing.T) {
	t.Parallel()
	require.Equal(t, domain.Table{0, 5 * sec, 10 * sec, 20 * sec, 40 * sec, 80 * sec}, domain.ARCTable)
	tests := []struct {
		n    int
		want time.Duration
		rule string
	}{
		{0, 0, "failedRunnerBackoff[0] = 0 s"},
		{1, 5 * sec, "failedRunnerBackoff[1] = 5 s: RequeueAfter(backoff[1]) after the first failure"},
		{2, 10 * sec, "failedRunnerBackoff[2] = 10 s"},
		{3, 20 * sec, "failedRunnerBackoff[3] = 20 s"},
		{4, 40 * sec, "failedRunnerBackoff[4] = 40 s"},
		{5, 80 * sec, "failedRunnerBackoff[5] = 80 s (n <= maxFailures 5)"},
		{6, 80 * sec, "past the end the last entry repeats"},
		{1000, 80 * sec, "past the end the last entry repeats"},
		{-1, 0, "negative n is the first entry"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, domain.ARCTable.Delay(tc.n), tc.rule)
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Duration(0), domain.Table(nil).Delay(3), "empty table -> 0")
	require.Equal(t, time.Duration(0), domain.Table{}.Delay(0), "empty table -> 0")
	one := domain.Table{7 * sec}
	require.Equal(t, 7*sec, one.Delay(0))
	require.Equal(t, 7*sec, one.Delay(1))
	require.Equal(t, 7*sec, one.Delay(99))
	tbl := domain.Table{sec, 2 * sec, 3 * sec}
	require.Equal(t, []time.Duration{sec, 2 * sec, 3 * sec, 3 * sec}, []time.Duration{tbl.Delay(0), tbl.Delay(1), tbl.Delay(2), tbl.Delay(3)})
}

// All three policies satisfy Backoff.
func TestBackoffInterface(t *testing.T) {
	t.Parallel()
	policies := map[string]domain.Backoff{
		"full jitter": domain.FullJitter{Rand: func(n int64) int64 { return n - 1 }},
		"kubevela":    domain.KubeVela{Cap: domain.KubeVelaWaitCap},
		"arc":         domain.ARCTable,
	}
	want := map[string]time.Duration{"full jitter": 4 * sec, "kubevela": sec, "arc": 20 * sec}
	for name, b := range policies {
		require.Equal(t, want[name], b.Delay(3), name)
	}
}
